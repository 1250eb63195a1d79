/* robo's exported policy (robo_policy.c) flying Betaflight at motor level: the SITL build, or (ROBO_BOARD) a flight
   controller's own firmware (make TARGET=STM32F405 ...), where the mixer calls roboBoardMixer.

   Observation (22,), robo's deployable quadrotor observation (sims/envs/observation.py), world and body FLU:
     0:3   position - reference, m         from the simulator packet (virtual GPS fields, double precision);
           ROBO_BOARD: north/west of the GPS home point (set at arming) from the GPS solution, up from the
           firmware's altitude estimate (zeroed at arming), so the target is relative to where it armed
     3:12  rotation body -> world, row-major from the firmware's attitude quaternion (getQuaternion)
     12:15 velocity - reference's, m/s      from the simulator packet; ROBO_BOARD: over ground from the GPS's
           speed and course, up from the altitude estimate's derivative
     15:18 body rates, rad/s                from the firmware's calibrated, aligned gyro (gyro.gyroADC, deg/s),
           before its low-pass filters: their coefficients assume Betaflight's 8 kHz gyro, and on the stock
           SITL clock they ran once per 1 kHz packet, lagging 8x (docs/guide/hardware.md)
     18:22 previous action [FR, BR, BL, FL], as the policy's manifest says it was trained:
           clipped_hover (ROBO_PREVIOUS_ACTION_RAW 0): the command last written, clipped to [-1, 1];
           raw_motor_state (1): the policy's output as given; ROBO_INITIAL_PREVIOUS_ACTION after arming
   The reference is the target (hover) or robo's figure-eight around it (ROBO_FIGURE_EIGHT), at time
   policy steps x ROBO_POLICY_DT since arming. The policy runs every ROBO_POLICY_EVERY-th state packet
   (ROBO_BOARD: every (ROBO_POLICY_DT / the PID loop time)-th mixer call).
   Action (4,) in [-1, 1] -> motor = (a + 1) / 2 in [0, 1] (clipped), written straight into the servo packet
   (ROBO_BOARD: into the mixer's outputs, scaled to the motor protocol's range, Betaflight's quad-X order).
   The firmware's attitude is body FRD -> world NED; robo's is FLU -> NWU: (w, x, -y, -z).
   Each policy step is timed with the firmware's real-time clock (nanos64_real); a line
   "[robo_onboard] ..." goes to stdout every ROBO_LOG_EVERY steps; with ROBO_LOG_STEPS, "[robo_step] ..." every step.
   ROBO_BOARD: no stdout, no threads; the step time is kept in roboBoardStepUs. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "platform.h"

#include "common/maths.h"

#include "fc/runtime_config.h"
#include "flight/imu.h"
#include "sensors/gyro.h"

#include "robo_onboard.h"
#include "robo_onboard_config.h"
#include "robo_policy.h"

#if ROBO_POLICY_OBS_DIM != 22 || ROBO_POLICY_ACTION_DIM != 4
#error "robo_onboard needs a policy with obs (22,) and action (4,): robo's quadrotor observation and four motors"
#endif

#if ROBO_BOARD
#include "common/vector.h"
#include "drivers/time.h"
#include "flight/pid.h"
#include "flight/position.h"
#include "io/gps.h"
#define LOCK_POSE()
#define UNLOCK_POSE()
typedef float real_t;  /* the M4F's FPU is single precision */
#define R(x) ((float)(x))
#define SIN sinf
#define COS cosf
static uint64_t nanos64_real(void) { return 1000u * (uint64_t)micros(); }
#else
#include <pthread.h>
#include <stdio.h>
uint64_t nanos64_real(void);
static pthread_mutex_t poseLock = PTHREAD_MUTEX_INITIALIZER;
#define LOCK_POSE() pthread_mutex_lock(&poseLock)
#define UNLOCK_POSE() pthread_mutex_unlock(&poseLock)
typedef double real_t;
#define R(x) ((double)(x))
#define SIN sin
#define COS cos
#endif

static real_t pose[6];  /* position (3,) then velocity (3,), world FLU */
static bool fresh;      /* a state packet arrived since the last policy step */

static robo_policy_state policyState;
static float action[4];    /* the command written, clipped to [-1, 1] */
static float previous[4];  /* what obs[18:22] reports */
static float rawAction[4]; /* the policy's output before the clip */
static bool wasArmed;
static uint64_t packets;   /* state packets since arming */
static uint64_t flightSteps; /* policy steps since arming */
static uint64_t steps, windowSteps, windowNs, windowMaxNs, totalNs;

#if !ROBO_BOARD
void roboOnboardState(const double position[3], const double velocity[3])
{
    const double deg = M_PI / 180.0;
    LOCK_POSE();
    pose[0] = (position[1] - ROBO_ORIGIN_LAT) * deg * ROBO_EARTH_RADIUS;
    pose[1] = -(position[0] - ROBO_ORIGIN_LON) * deg * ROBO_EARTH_RADIUS * cos(ROBO_ORIGIN_LAT * deg);
    pose[2] = position[2] - ROBO_ORIGIN_ALT;
    pose[3] = velocity[1];
    pose[4] = -velocity[0];
    pose[5] = velocity[2];
    fresh = true;
    UNLOCK_POSE();
}
#endif

static void reference(real_t ref[6])
{
    const real_t target[3] = {R(ROBO_TARGET_X), R(ROBO_TARGET_Y), R(ROBO_TARGET_Z)};
    int i;
    for (i = 0; i < 3; ++i) {
        ref[i] = target[i];
        ref[3 + i] = 0.0;
    }
#if ROBO_FIGURE_EIGHT
    {
        const real_t wt = R(ROBO_F8_OMEGA * ROBO_POLICY_DT) * (real_t)flightSteps;
        ref[0] += R(ROBO_F8_AMPLITUDE) * SIN(wt);
        ref[1] += R(0.5 * ROBO_F8_AMPLITUDE) * SIN(R(2) * wt);
        ref[3] = R(ROBO_F8_AMPLITUDE * ROBO_F8_OMEGA) * COS(wt);
        ref[4] = R(ROBO_F8_AMPLITUDE * ROBO_F8_OMEGA) * COS(R(2) * wt);
    }
#endif
}

static void observe(float obs[22])
{
    real_t ref[6];
    quaternion_t q;
    float w, x, y, z;
    int i;
    reference(ref);
    LOCK_POSE();
    for (i = 0; i < 3; ++i) {
        obs[i] = (float)(pose[i] - ref[i]);
        obs[12 + i] = (float)(pose[3 + i] - ref[3 + i]);
    }
    fresh = false;
    UNLOCK_POSE();
    getQuaternion(&q);
    w = q.w; x = q.x; y = -q.y; z = -q.z;
    obs[3] = 1.0f - 2.0f * (y * y + z * z); obs[4] = 2.0f * (x * y - w * z); obs[5] = 2.0f * (x * z + w * y);
    obs[6] = 2.0f * (x * y + w * z); obs[7] = 1.0f - 2.0f * (x * x + z * z); obs[8] = 2.0f * (y * z - w * x);
    obs[9] = 2.0f * (x * z - w * y); obs[10] = 2.0f * (y * z + w * x); obs[11] = 1.0f - 2.0f * (x * x + y * y);
    for (i = 0; i < 3; ++i) {
        obs[15 + i] = gyro.gyroADC[i] * (M_PIf / 180.0f);
    }
    for (i = 0; i < 4; ++i) {
        obs[18 + i] = previous[i];
    }
}

static void logWindow(const float obs[22])
{
#if ROBO_BOARD
    (void)obs;
#else
    printf("[robo_onboard] steps %llu step_us mean %.3f max %.3f total_mean %.3f "
           "obs_pos %.4f %.4f %.4f obs_rate %.4f %.4f %.4f action %.4f %.4f %.4f %.4f\n",
           (unsigned long long)steps, 1e-3 * (double)windowNs / (double)windowSteps, 1e-3 * (double)windowMaxNs,
           1e-3 * (double)totalNs / (double)steps, (double)obs[0], (double)obs[1], (double)obs[2],
           (double)obs[15], (double)obs[16], (double)obs[17],
           (double)action[0], (double)action[1], (double)action[2], (double)action[3]);
    fflush(stdout);
#endif
    windowSteps = windowNs = windowMaxNs = 0;
}

#if ROBO_LOG_STEPS && !ROBO_BOARD
/* "[robo_step] k o0 .. o21 a0 .. a3": the flight's policy step k, its observation and the policy's output before
   the clip (for fine-tuning: what the policy saw and did, as a real vehicle's onboard log records it) */
static void logStep(const float obs[22])
{
    int i;
    printf("[robo_step] %llu", (unsigned long long)flightSteps);
    for (i = 0; i < 22; ++i) {
        printf(" %.7g", (double)obs[i]);
    }
    for (i = 0; i < 4; ++i) {
        printf(" %.7g", (double)rawAction[i]);
    }
    printf("\n");
    fflush(stdout);
}
#endif

#if ROBO_BOARD
uint32_t roboBoardStepUs;  /* the last policy step's time, µs */

static uint64_t policyEvery(void)  /* PID loops per policy step */
{
    const uint64_t every = (uint64_t)lrintf((float)ROBO_POLICY_DT * 1e6f / (float)targetPidLooptime);
    return every > 0 ? every : 1;
}
#else
static uint64_t policyEvery(void) { return ROBO_POLICY_EVERY; }
#endif

bool roboOnboardMotors(float motor_speed[4])
{
    float obs[22];
    uint64_t t0, ns;
    int i;
    if (!ARMING_FLAG(ARMED)) {
        wasArmed = false;
        return false;
    }
    if (!wasArmed) {  /* a new flight: the policy's state and previous action start afresh */
        robo_policy_reset(&policyState);
        for (i = 0; i < 4; ++i) {
            previous[i] = ROBO_INITIAL_PREVIOUS_ACTION;
            action[i] = -1.0f;
        }
        wasArmed = true;
        fresh = true;
        packets = flightSteps = 0;
    }
    if (fresh && packets++ % policyEvery() == 0) {
        observe(obs);
        t0 = nanos64_real();
        robo_policy_step(&policyState, obs, action);
        ns = nanos64_real() - t0;
        for (i = 0; i < 4; ++i) {
            previous[i] = rawAction[i] = action[i];
            action[i] = fminf(fmaxf(action[i], -1.0f), 1.0f);
#if !ROBO_PREVIOUS_ACTION_RAW
            previous[i] = action[i];
#endif
        }
#if ROBO_LOG_STEPS && !ROBO_BOARD
        logStep(obs);
#endif
        flightSteps++;
        steps++; windowSteps++; windowNs += ns; totalNs += ns;
        windowMaxNs = ns > windowMaxNs ? ns : windowMaxNs;
#if ROBO_BOARD
        roboBoardStepUs = (uint32_t)(ns / 1000u);
#endif
        if (windowSteps >= ROBO_LOG_EVERY) {
            logWindow(obs);
        }
    } else {
        fresh = false;
    }
    /* robo [FR, BR, BL, FL] -> servo packet [FR, RL, FL, RR] */
    motor_speed[0] = 0.5f * (action[0] + 1.0f);
    motor_speed[1] = 0.5f * (action[2] + 1.0f);
    motor_speed[2] = 0.5f * (action[3] + 1.0f);
    motor_speed[3] = 0.5f * (action[1] + 1.0f);
    return true;
}

#if ROBO_BOARD
void roboBoardMixer(float *motor, int motorCount, float low, float high)
{
    const float deg = M_PIf / 180.0f;
    float speed[4], course, v;
    vector2_t d;
    if (motorCount != 4) {
        return;
    }
    GPS_distance2d(&GPS_home_llh, &gpsSol.llh, &d);  /* cm, x east, y north */
    course = 0.1f * (float)gpsSol.groundCourse * deg;
    v = 0.01f * (float)gpsSol.groundSpeed;
    pose[0] = 0.01f * d.y;
    pose[1] = -0.01f * d.x;
    pose[2] = 0.01f * getAltitudeCm();
    pose[3] = v * cosf(course);
    pose[4] = -v * sinf(course);
    pose[5] = 0.01f * getAltitudeDerivative();
    fresh = true;
    if (!roboOnboardMotors(speed)) {
        return;
    }
    /* servo packet [FR, RL, FL, RR] -> Betaflight quad-X motors 1-4 [RR, FR, RL, FL] */
    motor[0] = low + (high - low) * speed[3];
    motor[1] = low + (high - low) * speed[0];
    motor[2] = low + (high - low) * speed[1];
    motor[3] = low + (high - low) * speed[2];
}
#endif
