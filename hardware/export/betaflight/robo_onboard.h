/* robo's exported policy as the motor controller of Betaflight's SITL build (added by robo's build step,
   hardware/export/betaflight_build.py). sitl.c calls these two functions:
   roboOnboardState() from updateState(), with the simulator packet's position and velocity;
   roboOnboardMotors() from pwmCompleteMotorUpdate(), in the control loop, just before the motor packet is sent.
   A board build (ROBO_BOARD) calls roboBoardMixer() from the mixer instead. */
#pragma once

#include <stdbool.h>

/* position: (longitude deg, latitude deg, altitude m); velocity: ENU m/s (the fdm_packet's fields) */
void roboOnboardState(const double position[3], const double velocity[3]);

/* While armed: runs the policy once per new state packet and writes the four motors (servo packet order
   [FR, RL, FL, RR], [0, 1]); returns whether it wrote them. Disarmed: leaves the firmware's outputs alone. */
bool roboOnboardMotors(float motor_speed[4]);

/* ROBO_BOARD: from the mixer, after it wrote motor[0..motorCount) (the motor protocol's values, low..high): while
   armed, the policy's motors replace them (a quad-X, motorCount 4). */
void roboBoardMixer(float *motor, int motorCount, float low, float high);
