/* One RK4 step of B quadrotors: the C twin of sims/quadrotor/dynamics.py:rk4_step.
 *
 * Compiled at first use by sims/quadrotor/c_compile.py, once with -DREAL=float and once with
 * -DREAL=double, and called through ctypes on torch's CPU buffers (no copies). Same model, same
 * order of operations as the torch step, so the two agree to floating-point rounding.
 *
 * Layouts (row-major, batch first, exactly the ParamsBatch tensors):
 *   state (B, 17): p (3) world FLU m, q (w, x, y, z) body -> world, v (3) world m/s,
 *                  w (3) body rad/s, motor states (4) in [0, 1]
 *   action (B, 4) in [-1, 1] (clipped), ext (B, 3) world force N or NULL,
 *   mass (B), inertia / inertia_inv (B, 3, 3), mixer (B, 6, 4), curve (B, 4, 3),
 *   tau_rising / tau_falling (B, 4) s, gravity (B, 3) m/s^2, time (B) s or NULL (advanced by dt).
 *
 * Environments are integrated LANES at a time in a batch-last ("structure of arrays") block,
 * so that every loop below runs over LANES independent quadrotors and the compiler vectorizes it.
 */
#include <math.h>
#include <stddef.h>

#ifndef REAL
#define REAL float
#endif
#ifndef LANES
#define LANES 16
#endif

#define L LANES
#ifndef SCALAR_TAIL
#define SCALAR_TAIL 2  /* a last block of at most this many environments runs one lane wide */
#endif
#define SQRT(v) (sizeof(REAL) == sizeof(float) ? sqrtf((float)(v)) : sqrt((double)(v)))
#define LOOP for (int l = 0; l < nl; ++l)
#define INLINE static inline __attribute__((always_inline))

typedef struct {
    REAL mass[L], g[3][L], J[9][L], Ji[9][L], M[24][L], c[12][L], tr[4][L], tf[4][L], ext[3][L];
} block_params;

/* state_derivative of the first nl lanes of a block: x (17, L), u (4, L) -> dx (17, L) */
INLINE void derivative(const int nl, const REAL x[17][L], const REAL u[4][L], const block_params *restrict p,
                       REAL dx[17][L])
{
    LOOP {
        const REAL qw = x[3][l], qx = x[4][l], qy = x[5][l], qz = x[6][l];
        const REAL wx = x[10][l], wy = x[11][l], wz = x[12][l];
        REAL T[4], W[6];
        for (int j = 0; j < 4; ++j) {
            const REAL m = x[13 + j][l];
            T[j] = p->c[3 * j][l] + m * (p->c[3 * j + 1][l] + m * p->c[3 * j + 2][l]);
        }
        for (int r = 0; r < 6; ++r)
            W[r] = ((p->M[4 * r][l] * T[0] + p->M[4 * r + 1][l] * T[1]) + p->M[4 * r + 2][l] * T[2])
                   + p->M[4 * r + 3][l] * T[3];
        /* rotate the body force to world: f + qw t + qv x t with t = 2 qv x f */
        const REAL tx = 2 * (qy * W[2] - qz * W[1]), ty = 2 * (qz * W[0] - qx * W[2]),
                   tz = 2 * (qx * W[1] - qy * W[0]);
        const REAL fx = (W[0] + qw * tx) + (qy * tz - qz * ty) + p->ext[0][l];
        const REAL fy = (W[1] + qw * ty) + (qz * tx - qx * tz) + p->ext[1][l];
        const REAL fz = (W[2] + qw * tz) + (qx * ty - qy * tx) + p->ext[2][l];
        const REAL Jx = (p->J[0][l] * wx + p->J[1][l] * wy) + p->J[2][l] * wz;
        const REAL Jy = (p->J[3][l] * wx + p->J[4][l] * wy) + p->J[5][l] * wz;
        const REAL Jz = (p->J[6][l] * wx + p->J[7][l] * wy) + p->J[8][l] * wz;
        const REAL ex = W[3] - (wy * Jz - wz * Jy), ey = W[4] - (wz * Jx - wx * Jz),
                   ez = W[5] - (wx * Jy - wy * Jx);
        dx[0][l] = x[7][l];
        dx[1][l] = x[8][l];
        dx[2][l] = x[9][l];
        dx[3][l] = ((qx * wx + qy * wy) + qz * wz) * (REAL)-0.5;
        dx[4][l] = (qw * wx + (qy * wz - qz * wy)) * (REAL)0.5;
        dx[5][l] = (qw * wy + (qz * wx - qx * wz)) * (REAL)0.5;
        dx[6][l] = (qw * wz + (qx * wy - qy * wx)) * (REAL)0.5;
        dx[7][l] = fx / p->mass[l] + p->g[0][l];
        dx[8][l] = fy / p->mass[l] + p->g[1][l];
        dx[9][l] = fz / p->mass[l] + p->g[2][l];
        dx[10][l] = (p->Ji[0][l] * ex + p->Ji[1][l] * ey) + p->Ji[2][l] * ez;
        dx[11][l] = (p->Ji[3][l] * ex + p->Ji[4][l] * ey) + p->Ji[5][l] * ez;
        dx[12][l] = (p->Ji[6][l] * ex + p->Ji[7][l] * ey) + p->Ji[8][l] * ez;
        for (int j = 0; j < 4; ++j) {
            const REAL m = x[13 + j][l];
            dx[13 + j][l] = (u[j][l] - m) / (u[j][l] >= m ? p->tr[j][l] : p->tf[j][l]);
        }
    }
}

/* y = x + h k over a block */
INLINE void axpy(const int nl, REAL y[17][L], const REAL x[17][L], REAL h, const REAL k[17][L])
{
    for (int i = 0; i < 17; ++i)
        LOOP y[i][l] = x[i][l] + h * k[i][l];
}

/* copy n rows of `width` values from src (row stride `width`) into the columns of a (width, L) block,
 * repeating row 0 in lanes n..nl-1 so that they stay finite */
INLINE void gather(const int nl, REAL *restrict dst, const REAL *restrict src, int width, int n)
{
    LOOP {
        const REAL *row = src + (size_t)(l < n ? l : 0) * width;
        for (int i = 0; i < width; ++i)
            dst[i * L + l] = row[i];
    }
}

/* parameter pointers, in this order (sims/quadrotor/c_step.py:PARAM_FIELDS) */
enum { MASS, INERTIA, INERTIA_INV, MIXER, CURVE, TAU_RISING, TAU_FALLING, GRAVITY, N_PARAMS };

/* RK4 step of environments b0 .. b0+n-1 (n <= nl) computed in nl lanes */
INLINE void step_block(const int nl, long b0, int n, double dt_, const REAL *restrict state,
                       const REAL *restrict action, const REAL *restrict ext, const REAL *const *prm,
                       REAL *restrict out, REAL *restrict time)
{
    const REAL dt = (REAL)dt_, h2 = (REAL)(0.5 * dt_), h6 = (REAL)(dt_ / 6.0);
    block_params p;
    REAL x[17][L], u[4][L], y[17][L], k1[17][L], k2[17][L], k3[17][L], k4[17][L];
    gather(nl, &x[0][0], state + b0 * 17, 17, n);
    gather(nl, &u[0][0], action + b0 * 4, 4, n);
    gather(nl, p.mass, prm[MASS] + b0, 1, n);
    gather(nl, &p.J[0][0], prm[INERTIA] + b0 * 9, 9, n);
    gather(nl, &p.Ji[0][0], prm[INERTIA_INV] + b0 * 9, 9, n);
    gather(nl, &p.M[0][0], prm[MIXER] + b0 * 24, 24, n);
    gather(nl, &p.c[0][0], prm[CURVE] + b0 * 12, 12, n);
    gather(nl, &p.tr[0][0], prm[TAU_RISING] + b0 * 4, 4, n);
    gather(nl, &p.tf[0][0], prm[TAU_FALLING] + b0 * 4, 4, n);
    gather(nl, &p.g[0][0], prm[GRAVITY] + b0 * 3, 3, n);
    if (ext)
        gather(nl, &p.ext[0][0], ext + b0 * 3, 3, n);
    else
        for (int i = 0; i < 3; ++i)
            LOOP p.ext[i][l] = 0;
    for (int j = 0; j < 4; ++j)  /* action -> motor command (a + 1) / 2, clipped; NaN stays NaN */
        LOOP {
            const REAL a = u[j][l] < -1 ? (REAL)-1 : (u[j][l] > 1 ? (REAL)1 : u[j][l]);
            u[j][l] = (a + 1) * (REAL)0.5;
        }
    derivative(nl, x, u, &p, k1);
    axpy(nl, y, x, h2, k1);
    derivative(nl, y, u, &p, k2);
    axpy(nl, y, x, h2, k2);
    derivative(nl, y, u, &p, k3);
    axpy(nl, y, x, dt, k3);
    derivative(nl, y, u, &p, k4);
    for (int i = 0; i < 17; ++i)
        LOOP y[i][l] = x[i][l] + h6 * ((k1[i][l] + 2 * (k2[i][l] + k3[i][l])) + k4[i][l]);
    LOOP {
        const REAL s = SQRT(((y[3][l] * y[3][l] + y[4][l] * y[4][l]) + y[5][l] * y[5][l]) + y[6][l] * y[6][l]);
        for (int i = 3; i < 7; ++i)
            y[i][l] = y[i][l] / s;
        for (int i = 13; i < 17; ++i)
            y[i][l] = y[i][l] < 0 ? (REAL)0 : (y[i][l] > 1 ? (REAL)1 : y[i][l]);
    }
    for (int l = 0; l < n; ++l)
        for (int i = 0; i < 17; ++i)
            out[(b0 + l) * 17 + i] = y[i][l];
    if (time)
        for (int l = 0; l < n; ++l)
            time[b0 + l] += dt;
}

/* Writes the next states of all B environments to `out` and advances `time` (or NULL) by dt.
 * Returns -1, or with `validate` the index of the first environment whose action is not finite
 * (then nothing is stepped). Full blocks run LANES wide, the last few environments one by one. */
long robo_rk4_step(long B, double dt, const REAL *restrict state, const REAL *restrict action,
                   const REAL *restrict ext, const REAL *const *params, REAL *restrict out,
                   REAL *restrict time, int validate)
{
    if (validate)
        for (long i = 0; i < 4 * B; ++i)
            if (!isfinite(action[i]))
                return i / 4;
    long b0 = 0;
    for (; b0 + L <= B || (b0 < B && B - b0 > SCALAR_TAIL); b0 += L)
        step_block(L, b0, B - b0 < L ? (int)(B - b0) : L, dt, state, action, ext, params, out, time);
    for (; b0 < B; ++b0)
        step_block(1, b0, 1, dt, state, action, ext, params, out, time);
    return -1;
}
