! A nonlinear function with a hand-written VJP and JVP, exported through bind(c) with the calling convention
! documented in flowlearn/bridge/clib.py. The bridge tests compile this file with gfortran.
!
! ff_decay(x, k; c) -> y,  y_i = x_i exp(-k_i x_i) + c x_i**3
! It fails (status 5) when an exponent -k_i x_i exceeds 700, where exp overflows.
module ff_nonlinear
    use, intrinsic :: iso_c_binding
    implicit none
    private
    public :: ff_decay, ff_decay_vjp, ff_decay_jvp

contains

    subroutine set_message(msg, msg_len, text)
        character(kind=c_char), intent(out) :: msg(*)
        integer(c_int64_t), intent(in) :: msg_len
        character(len=*), intent(in) :: text
        integer :: i, n
        n = int(min(int(len(text), c_int64_t), msg_len - 1))
        do i = 1, n
            msg(i) = text(i:i)
        end do
        msg(n + 1) = c_null_char
    end subroutine set_message

    ! Checks the argument counts and sizes, and points xs and ks at the two inputs.
    integer(c_int) function take_inputs(x, nx, n_x, n_p, n_y, xs, ks, msg, msg_len) result(status)
        type(c_ptr), intent(in) :: x(*)
        integer(c_int64_t), intent(in) :: nx(*)
        integer(c_int64_t), intent(in) :: n_x, n_p, n_y, msg_len
        real(c_double), pointer, intent(out) :: xs(:), ks(:)
        character(kind=c_char), intent(out) :: msg(*)
        status = 0
        if (n_x /= 2 .or. n_p /= 1 .or. n_y /= 1) then
            call set_message(msg, msg_len, "ff_decay expects 2 inputs, 1 parameter and 1 output")
            status = 1
            return
        end if
        if (nx(1) /= nx(2)) then
            call set_message(msg, msg_len, "ff_decay: x and k differ in size")
            status = 2
            return
        end if
        call c_f_pointer(x(1), xs, [nx(1)])
        call c_f_pointer(x(2), ks, [nx(2)])
        if (any(-ks * xs > 700.0_c_double)) then
            call set_message(msg, msg_len, "ff_decay: exponent -k*x above 700 overflows")
            status = 5
        end if
    end function take_inputs

    integer(c_int) function ff_decay(x, nx, n_x, p, n_p, y, ny, n_y, msg, msg_len) bind(c, name="ff_decay")
        type(c_ptr), intent(in) :: x(*), y(*)
        integer(c_int64_t), intent(in) :: nx(*), ny(*)
        integer(c_int64_t), value :: n_x, n_p, n_y, msg_len
        real(c_double), intent(in) :: p(*)
        character(kind=c_char), intent(out) :: msg(*)
        real(c_double), pointer :: xs(:), ks(:), ys(:)
        ff_decay = take_inputs(x, nx, n_x, n_p, n_y, xs, ks, msg, msg_len)
        if (ff_decay /= 0) return
        call c_f_pointer(y(1), ys, [ny(1)])
        ys = xs * exp(-ks * xs) + p(1) * xs**3
    end function ff_decay

    integer(c_int) function ff_decay_vjp(x, nx, n_x, p, n_p, ybar, ny, n_y, xbar, msg, msg_len) &
            bind(c, name="ff_decay_vjp")
        type(c_ptr), intent(in) :: x(*), ybar(*)
        type(c_ptr), intent(inout) :: xbar(*)
        integer(c_int64_t), intent(in) :: nx(*), ny(*)
        integer(c_int64_t), value :: n_x, n_p, n_y, msg_len
        real(c_double), intent(in) :: p(*)
        character(kind=c_char), intent(out) :: msg(*)
        real(c_double), pointer :: xs(:), ks(:), yb(:), xb(:), kb(:)
        ff_decay_vjp = take_inputs(x, nx, n_x, n_p, n_y, xs, ks, msg, msg_len)
        if (ff_decay_vjp /= 0) return
        call c_f_pointer(ybar(1), yb, [ny(1)])
        call c_f_pointer(xbar(1), xb, [nx(1)])
        call c_f_pointer(xbar(2), kb, [nx(2)])
        xb = yb * (exp(-ks * xs) * (1.0_c_double - ks * xs) + 3.0_c_double * p(1) * xs**2)
        kb = -yb * xs**2 * exp(-ks * xs)
    end function ff_decay_vjp

    integer(c_int) function ff_decay_jvp(x, nx, n_x, p, n_p, xdot, ydot, ny, n_y, msg, msg_len) &
            bind(c, name="ff_decay_jvp")
        type(c_ptr), intent(in) :: x(*), xdot(*), ydot(*)
        integer(c_int64_t), intent(in) :: nx(*), ny(*)
        integer(c_int64_t), value :: n_x, n_p, n_y, msg_len
        real(c_double), intent(in) :: p(*)
        character(kind=c_char), intent(out) :: msg(*)
        real(c_double), pointer :: xs(:), ks(:), xd(:), kd(:), yd(:)
        ff_decay_jvp = take_inputs(x, nx, n_x, n_p, n_y, xs, ks, msg, msg_len)
        if (ff_decay_jvp /= 0) return
        call c_f_pointer(xdot(1), xd, [nx(1)])
        call c_f_pointer(xdot(2), kd, [nx(2)])
        call c_f_pointer(ydot(1), yd, [ny(1)])
        yd = (exp(-ks * xs) * (1.0_c_double - ks * xs) + 3.0_c_double * p(1) * xs**2) * xd &
            - xs**2 * exp(-ks * xs) * kd
    end function ff_decay_jvp

end module ff_nonlinear
