// Graceful stop on SIGTERM (Slurm and mpirun signal every task before killing it). The signal
// handler only sets a lock-free flag; at each step boundary the trainer calls should_stop(),
// a collective (all-reduce max of the flag), so every rank agrees on the same step to write a
// checkpoint and exit 0 even when only some ranks were signalled. Give ranks time with
// `mpirun --mca odls_base_sigkill_timeout <seconds>` (README). SIGINT is handled the same way.
#pragma once

namespace omnibal::comm {

class Communicator;

/// Installs the SIGTERM and SIGINT handlers (sigaction, SA_RESTART). Idempotent.
void install_stop_handler();
/// True once this process received SIGTERM/SIGINT (or request_stop() was called).
bool stop_requested();
/// Sets the local flag as the handler does (tests, or a rank that wants the job to stop).
void request_stop();
/// Collective over `world` (every rank must call it at the same step): true on all ranks when
/// any rank has stop_requested(). Blocking under the watchdog.
bool should_stop(Communicator& world);

}  // namespace omnibal::comm
