/* Small nonlinear functions with hand-written VJPs and JVPs, following the calling convention documented in
 * flowlearn/bridge/clib.py. The bridge tests compile this file with gcc into a temporary directory. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define ARGS_IN const double *const *x, const int64_t *nx, int64_t n_x, const double *p, int64_t n_p
#define ARGS_MSG char *msg, int64_t msg_len

static int fail(char *msg, int64_t msg_len, int status, const char *text)
{
    snprintf(msg, (size_t)msg_len, "%s", text);
    return status;
}

/* Check the numbers of inputs, parameters and outputs and that all inputs have the same size. */
static int check(const int64_t *nx, int64_t n_x, int64_t want_x, int64_t n_p, int64_t want_p, int64_t n_y,
                 int64_t want_y, char *msg, int64_t msg_len)
{
    if (n_x != want_x || n_p != want_p || n_y != want_y) {
        snprintf(msg, (size_t)msg_len, "expected %lld inputs, %lld parameters and %lld outputs, got %lld, %lld, %lld",
                 (long long)want_x, (long long)want_p, (long long)want_y, (long long)n_x, (long long)n_p,
                 (long long)n_y);
        return 1;
    }
    for (int64_t i = 1; i < n_x; ++i)
        if (nx[i] != nx[0])
            return fail(msg, msg_len, 2, "inputs differ in size");
    return 0;
}

/* fl_poly(x, w; a) -> (y, s) with y = a sin(x) w + x^2 (elementwise) and s = sum(exp(x) w), a 0-d output. */
int fl_poly(ARGS_IN, double *const *y, const int64_t *ny, int64_t n_y, ARGS_MSG)
{
    int status = check(nx, n_x, 2, n_p, 1, n_y, 2, msg, msg_len);
    if (status)
        return status;
    const double *xv = x[0], *w = x[1], a = p[0];
    double s = 0.0;
    for (int64_t i = 0; i < nx[0]; ++i) {
        y[0][i] = a * sin(xv[i]) * w[i] + xv[i] * xv[i];
        s += exp(xv[i]) * w[i];
    }
    y[1][0] = s;
    (void)ny;
    return 0;
}

int fl_poly_vjp(ARGS_IN, const double *const *ybar, const int64_t *ny, int64_t n_y, double **xbar, ARGS_MSG)
{
    int status = check(nx, n_x, 2, n_p, 1, n_y, 2, msg, msg_len);
    if (status)
        return status;
    const double *xv = x[0], *w = x[1], a = p[0], sbar = ybar[1][0];
    for (int64_t i = 0; i < nx[0]; ++i) {
        double e = exp(xv[i]);
        xbar[0][i] = ybar[0][i] * (a * cos(xv[i]) * w[i] + 2.0 * xv[i]) + sbar * e * w[i];
        xbar[1][i] = ybar[0][i] * a * sin(xv[i]) + sbar * e;
    }
    (void)ny;
    return 0;
}

int fl_poly_jvp(ARGS_IN, const double *const *xdot, double *const *ydot, const int64_t *ny, int64_t n_y, ARGS_MSG)
{
    int status = check(nx, n_x, 2, n_p, 1, n_y, 2, msg, msg_len);
    if (status)
        return status;
    const double *xv = x[0], *w = x[1], a = p[0];
    double sdot = 0.0;
    for (int64_t i = 0; i < nx[0]; ++i) {
        double e = exp(xv[i]);
        ydot[0][i] = (a * cos(xv[i]) * w[i] + 2.0 * xv[i]) * xdot[0][i] + a * sin(xv[i]) * xdot[1][i];
        sdot += e * w[i] * xdot[0][i] + e * xdot[1][i];
    }
    ydot[1][0] = sdot;
    (void)ny;
    return 0;
}

/* fl_floor_scale(x, z) -> x^3 floor(z). The gradient in z is zero wherever it exists: the VJP reports it as
 * missing (NULL) instead of writing zeros. */
int fl_floor_scale(ARGS_IN, double *const *y, const int64_t *ny, int64_t n_y, ARGS_MSG)
{
    int status = check(nx, n_x, 2, n_p, 0, n_y, 1, msg, msg_len);
    if (status)
        return status;
    for (int64_t i = 0; i < nx[0]; ++i)
        y[0][i] = x[0][i] * x[0][i] * x[0][i] * floor(x[1][i]);
    (void)p;
    (void)ny;
    return 0;
}

int fl_floor_scale_vjp(ARGS_IN, const double *const *ybar, const int64_t *ny, int64_t n_y, double **xbar,
                       ARGS_MSG)
{
    int status = check(nx, n_x, 2, n_p, 0, n_y, 1, msg, msg_len);
    if (status)
        return status;
    for (int64_t i = 0; i < nx[0]; ++i)
        xbar[0][i] = 3.0 * x[0][i] * x[0][i] * floor(x[1][i]) * ybar[0][i];
    xbar[1] = NULL;
    (void)p;
    (void)ny;
    return 0;
}

int fl_floor_scale_jvp(ARGS_IN, const double *const *xdot, double *const *ydot, const int64_t *ny, int64_t n_y,
                       ARGS_MSG)
{
    int status = check(nx, n_x, 2, n_p, 0, n_y, 1, msg, msg_len);
    if (status)
        return status;
    for (int64_t i = 0; i < nx[0]; ++i)
        ydot[0][i] = 3.0 * x[0][i] * x[0][i] * floor(x[1][i]) * xdot[0][i];
    (void)p;
    (void)ny;
    return 0;
}

/* fl_sqrt(x) -> sqrt(x), failing on negative input. It exports no JVP. */
int fl_sqrt(ARGS_IN, double *const *y, const int64_t *ny, int64_t n_y, ARGS_MSG)
{
    int status = check(nx, n_x, 1, n_p, 0, n_y, 1, msg, msg_len);
    if (status)
        return status;
    for (int64_t i = 0; i < nx[0]; ++i) {
        if (x[0][i] < 0.0) {
            snprintf(msg, (size_t)msg_len, "negative input %g at index %lld", x[0][i], (long long)i);
            return 7;
        }
        y[0][i] = sqrt(x[0][i]);
    }
    (void)p;
    (void)ny;
    return 0;
}

int fl_sqrt_vjp(ARGS_IN, const double *const *ybar, const int64_t *ny, int64_t n_y, double **xbar, ARGS_MSG)
{
    int status = check(nx, n_x, 1, n_p, 0, n_y, 1, msg, msg_len);
    if (status)
        return status;
    for (int64_t i = 0; i < nx[0]; ++i)
        xbar[0][i] = 0.5 / sqrt(x[0][i]) * ybar[0][i];
    (void)p;
    (void)ny;
    return 0;
}

/* fl_racy(x; c) -> c x, computed through a static scratch buffer with a pause in between: concurrent calls that
 * are not serialised overwrite each other's input. */
#define RACY_CAPACITY 64
static double scratch[RACY_CAPACITY];

int fl_racy(ARGS_IN, double *const *y, const int64_t *ny, int64_t n_y, ARGS_MSG)
{
    int status = check(nx, n_x, 1, n_p, 1, n_y, 1, msg, msg_len);
    if (status)
        return status;
    if (nx[0] > RACY_CAPACITY)
        return fail(msg, msg_len, 3, "input larger than the scratch buffer");
    for (int64_t i = 0; i < nx[0]; ++i)
        scratch[i] = x[0][i];
    struct timespec pause = {0, 2000000};
    nanosleep(&pause, NULL);
    for (int64_t i = 0; i < nx[0]; ++i)
        y[0][i] = p[0] * scratch[i];
    (void)ny;
    return 0;
}

int fl_racy_vjp(ARGS_IN, const double *const *ybar, const int64_t *ny, int64_t n_y, double **xbar, ARGS_MSG)
{
    int status = check(nx, n_x, 1, n_p, 1, n_y, 1, msg, msg_len);
    if (status)
        return status;
    for (int64_t i = 0; i < nx[0]; ++i)
        xbar[0][i] = p[0] * ybar[0][i];
    (void)x;
    (void)ny;
    return 0;
}
