//! Short-lived helper processes that write the other nodes' copies of
//! `leaf_worker` for a snowflake renewal on Citus (`citus::copies`).
//!
//! Citus reads a remote answer without a timeout, and its cancel is libpq's
//! blocking `PQcancel`: a statement that is running on a node at the
//! instant the node hangs waits for as long as the node does, and so does
//! the process that sent it. So the snowflake worker does not send them
//! itself. For each other copy it starts a helper (a dynamic background
//! worker) that runs the copy's statement through `master_run_on_worker`
//! and posts the answer in shared memory; the worker waits for the answers
//! up to a deadline and counts the ones it got. A helper that hangs keeps
//! its slot, and that copy counts as missed until the helper returns; the
//! worker goes on with the others (a majority is enough).

use crate::runtime::bgworker::{pack_pair, postgres_die, unpack_pair};
use crate::runtime::copy_slot::{
    CopySlot, MAX_OTHER_COPIES, STARTING, read_text, write_text, write_truncated,
};
use crate::runtime::shmem::{Role, shared};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// How long at most the worker sleeps between looks at the helpers'
/// answers (a helper's exit also sets its latch).
const ANSWER_POLL: Duration = Duration::from_millis(50);

/// Run `command` on every node of `others` (host, port), each through a
/// helper of its own, and wait for the answers until `wait` has passed: per
/// node, the statement's result, or "host:port: why not".
pub fn run_on_others(
    db: usize,
    others: &[(String, i32)],
    command: &str,
    wait: Duration,
) -> Vec<Result<String, String>> {
    let sh = shared().expect("shared memory");
    let slots = sh.db(db).copy_slots();
    let nodes: Vec<String> = others.iter().map(|(h, p)| format!("{h}:{p}")).collect();
    let mut answers: Vec<Result<String, String>> = Vec::new();
    let mut launched: Vec<(usize, u64)> = Vec::new(); // (slot = node index, request)
    for (i, (host, port)) in others.iter().enumerate() {
        let node = &nodes[i];
        answers.push(Err(format!("{node}: no answer")));
        match launch(db, i, slots.get(i), (host.as_str(), *port), command) {
            Ok(request) => launched.push((i, request)),
            Err(why) => answers[i] = Err(format!("{node}: {why}")),
        }
    }
    wait_for_answers(slots, &launched, Instant::now() + wait);
    for (s, request) in launched {
        answers[s] = answer_of(&slots[s], request, &nodes[s], wait);
    }
    answers
}

/// Post `command` for the node at (host, port) in copy slot `i` of
/// database slot `db` (`slot`, None past `MAX_OTHER_COPIES`) and start its
/// helper: the request's number, or why the node gets none.
fn launch(
    db: usize,
    i: usize,
    slot: Option<&CopySlot>,
    (host, port): (&str, i32),
    command: &str,
) -> Result<u64, String> {
    let Some(slot) = slot else {
        return Err(format!("more than {MAX_OTHER_COPIES} other copies"));
    };
    if !slot.free() {
        return Err("the renewal sent before has not returned (the node hangs?)".to_string());
    }
    if !write_text(&slot.host, &slot.host_len, host)
        || !write_text(&slot.command, &slot.command_len, command)
    {
        return Err("host name or statement too long".to_string());
    }
    slot.port.store(port, SeqCst);
    let request = slot.asked.load(SeqCst) + 1;
    slot.asked.store(request, SeqCst);
    slot.registered_at
        .store(crate::runtime::clock::unix_ms(), SeqCst);
    slot.pid.store(STARTING, SeqCst);
    let started = BackgroundWorkerBuilder::new("leaf_id renewal helper")
        .set_type("leaf_id renewal helper")
        .set_library("leaf_id")
        .set_function("leaf_id_renewal_helper_main")
        .set_argument(Some(pack_pair(db as u32, i as u32)))
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .load_dynamic()
        .is_ok();
    if !started {
        slot.pid.store(0, SeqCst);
        return Err(
            "no background worker slot for a renewal helper (max_worker_processes)".to_string(),
        );
    }
    Ok(request)
}

/// Wait until every launched (slot, request) is answered, the worker is
/// told to stop, or `deadline` has passed.
fn wait_for_answers(slots: &[CopySlot], launched: &[(usize, u64)], deadline: Instant) {
    loop {
        let pending = launched
            .iter()
            .filter(|&&(s, request)| slots[s].answered.load(SeqCst) != request)
            .count();
        // SAFETY: ProcDiePending is this process's `volatile sig_atomic_t`, set by `die` on this
        // thread; read volatile through a raw pointer, as C does.
        let stopping = unsafe { (&raw const pg_sys::ProcDiePending).read_volatile() != 0 };
        if pending == 0 || stopping || Instant::now() >= deadline {
            break;
        }
        crate::runtime::clock::wait_on_latch(
            deadline
                .saturating_duration_since(Instant::now())
                .min(ANSWER_POLL),
        );
    }
}

/// The answer in `slot` to `request`, for node `node` ("host:port"): the
/// statement's result, or why not (none within `wait`, or its error).
fn answer_of(slot: &CopySlot, request: u64, node: &str, wait: Duration) -> Result<String, String> {
    if slot.answered.load(SeqCst) != request {
        Err(format!("{node}: no answer within {} ms", wait.as_millis()))
    } else if slot.success.load(SeqCst) == 1 {
        Ok(read_text(&slot.answer, &slot.answer_len))
    } else {
        Err(format!(
            "{node}: {}",
            read_text(&slot.answer, &slot.answer_len).trim()
        ))
    }
}

/// # Safety
///
/// Only as the `on_shmem_exit` callback `leaf_id_renewal_helper_main` registers once the helper
/// holds its copy slot: PostgreSQL calls it once, at the helper's exit, with the Datum it was
/// started with (the database slot's index, below `n_dbs`, and the copy slot's, whose `get`
/// succeeded before the registration).
#[pg_guard]
unsafe extern "C-unwind" fn helper_exit(_code: i32, arg: pg_sys::Datum) {
    let (db, s) = unpack_pair(arg);
    let (db, s) = (db as usize, s as usize);
    if let Some(sh) = shared() {
        // SAFETY: MyProcPid is this process's int global, set at its start, read by value.
        let pid = unsafe { pg_sys::MyProcPid };
        let _ = sh.db(db).copy_slots()[s]
            .pid
            .compare_exchange(pid, 0, SeqCst, SeqCst);
        let latch = sh.db(db).worker(Role::Snowflake).latch.load(SeqCst);
        if !latch.is_null() {
            // SAFETY: a non-null `latch` is the snowflake worker's MyLatch, the procLatch of its
            // PGPROC in shared memory, valid for the server's lifetime: if that worker has exited
            // since the load, the PGPROC is free or another process's, and the set is at worst a
            // spurious wakeup.
            unsafe { pg_sys::SetLatch(latch) };
        }
    }
}

#[pg_guard]
// SAFETY: no other symbol of the server or its libraries is named `leaf_id_renewal_helper_main`
// (the extension's prefix); the postmaster looks it up by this name (`run_on_others`) and calls it
// with one Datum, this signature.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn leaf_id_renewal_helper_main(arg: pg_sys::Datum) {
    let (db, s) = unpack_pair(arg);
    let (db, s) = (db as usize, s as usize);
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP);
    // SAFETY: `die` is PostgreSQL's async-signal-safe SIGTERM handler of backends: it sets flags
    // and this process's latch, and a background worker with shared memory access has its MyLatch
    // (InitProcess ran before this entry point).
    unsafe {
        // SIGTERM as for a backend (shutdown): the wait for an answer ends
        crate::runtime::pg_version::set_sigterm_handler(postgres_die);
    }
    let Some(sh) = shared() else { return };
    let Some(slot) = sh.db(db).copy_slots().get(s) else {
        return;
    };
    // the slot is this helper's only while the worker still waits for one
    // to start (it gives a helper up after START_GRACE_MS)
    if slot
        .pid
        // SAFETY: MyProcPid is this process's int global, set at its start, read by value.
        .compare_exchange(STARTING, unsafe { pg_sys::MyProcPid }, SeqCst, SeqCst)
        .is_err()
    {
        return;
    }
    // SAFETY: registers `helper_exit` (see its Safety) with this helper's own argument, by value,
    // only now that the slot's pid is ours; one registration, well within MAX_ON_EXITS.
    unsafe { pg_sys::on_shmem_exit(Some(helper_exit), arg) };
    let dboid = sh.db(db).dboid.load(SeqCst);
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(dboid)), None);
    crate::runtime::transaction::harden_session();
    let request = slot.asked.load(SeqCst);
    let host = read_text(&slot.host, &slot.host_len);
    let port = slot.port.load(SeqCst);
    let command = read_text(&slot.command, &slot.command_len);
    let result = crate::runtime::transaction::in_transaction(|_schema, _| {
        pgrx::spi::Spi::connect_mut(|client| {
            let row = client
                .update(
                    crate::runtime::worker_sql::RUN_ON_WORKER,
                    None,
                    &[
                        vec![host.clone()].into(),
                        vec![port].into(),
                        vec![command.clone()].into(),
                    ],
                )
                .map_err(crate::runtime::job_error::spi_err)?
                .first();
            Ok((
                row.get::<bool>(1)
                    .map_err(crate::runtime::job_error::spi_err)?
                    .unwrap_or(false),
                row.get::<String>(2)
                    .map_err(crate::runtime::job_error::spi_err)?
                    .unwrap_or_default(),
            ))
        })
    });
    let (success, answer) = match result {
        Ok(r) => r,
        Err(e) => (false, e.message),
    };
    write_truncated(&slot.answer, &slot.answer_len, &answer);
    slot.success.store(success as u32, SeqCst);
    slot.answered.store(request, SeqCst);
}
