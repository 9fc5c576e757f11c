//! The daemon's CPU pool: every CPU-bound job (a tile decode, a warp, a sample's assembly)
//! runs here, shared fairly and dropped as soon as nobody waits for it.
//!
//! - **Fair shares.** Jobs queue per [`Tenant`] (one per stream), tenants group by caller
//!   (a token, or `anonymous`). A free worker serves the caller that has used the least CPU
//!   time, and within it the stream that has used the least: start-time fair queueing on
//!   measured job time, two levels deep, as Linux's CFS does for task groups. A light stream
//!   beside a heavy one is served whenever it has work; a caller that opens many streams
//!   gets one caller's share, not one per stream. A queue that was idle rejoins at the
//!   lowest virtual time of those waiting, so idleness banks no credit.
//! - **Cancellation.** A job whose caller stopped waiting (its future was dropped: the
//!   stream ended, the client went away) is never started; one that is running can ask
//!   [`cancelled`] (or a [`Probe`] taken before fanning out) and stop early. Skipped jobs
//!   are counted ([`stats`]).
//! - **What a job holds lives as long as the job.** A job keeps its tenant alive, and a
//!   tenant keeps what it was given to [`Tenant::hold`] (a stream's memory reservation, its
//!   slots) until the last of its jobs has ended.
//!
//! Jobs run on rayon's global pool (so a job may itself use rayon's parallel iterators):
//! every submission spawns one rayon task, and each rayon task runs whichever queued job is
//! due, not necessarily its own. The tenant is found from the async task that submits
//! ([`scope`]); work submitted outside any scope shares one daemon tenant.
//!
//! This crate must never block the async reactor, never run a job whose waiter is gone,
//! and never know what a job is (no I/O, no formats).

#![deny(missing_docs)]

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::Instant;

/// Why a job gave no result.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CpuError {
    /// The job panicked (a bug); the pool goes on.
    #[error("a CPU task failed")]
    Panicked,
}

/// Who CPU time is accounted to: one stream (or one kind of daemon work), of one caller.
pub struct Tenant {
    id: u64,
    caller: Arc<str>,
    held: Mutex<Vec<Box<dyn Send>>>,
}

impl std::fmt::Debug for Tenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenant")
            .field("id", &self.id)
            .field("caller", &self.caller)
            .finish()
    }
}

static NEXT_TENANT: AtomicU64 = AtomicU64::new(1);

impl Tenant {
    /// A new tenant (a stream) of `caller`.
    pub fn new(caller: &str) -> Arc<Self> {
        Arc::new(Self {
            id: NEXT_TENANT.fetch_add(1, Ordering::Relaxed),
            caller: Arc::from(caller),
            held: Mutex::new(Vec::new()),
        })
    }

    /// Keeps `thing` until this tenant and every job it submitted have ended.
    pub fn hold(&self, thing: Box<dyn Send>) {
        if let Ok(mut held) = self.held.lock() {
            held.push(thing);
        }
    }

    /// The caller this tenant's time counts to.
    pub fn caller(&self) -> &str {
        &self.caller
    }
}

/// The tenant for work submitted outside any [`scope`].
fn daemon_tenant() -> Arc<Tenant> {
    static DAEMON: OnceLock<Arc<Tenant>> = OnceLock::new();
    DAEMON.get_or_init(|| Tenant::new("daemon")).clone()
}

thread_local! {
    /// The tenant of the future being polled on this thread.
    static CURRENT: RefCell<Option<Arc<Tenant>>> = const { RefCell::new(None) };
    /// The job running on this thread.
    static RUNNING: RefCell<Option<Arc<JobState>>> = const { RefCell::new(None) };
}

/// A future whose CPU work counts to one tenant: see [`scope`].
pub struct Scoped<F> {
    tenant: Arc<Tenant>,
    future: Pin<Box<F>>,
}

/// Runs `future` with `tenant` as the tenant of every job it submits.
pub fn scope<F: Future>(tenant: Arc<Tenant>, future: F) -> Scoped<F> {
    Scoped {
        tenant,
        future: Box::pin(future),
    }
}

/// The tenant of the future being polled now, if any (to carry into spawned tasks).
pub fn current() -> Option<Arc<Tenant>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Restores the previous tenant when a poll ends, a panicking one included.
struct Restore(Option<Arc<Tenant>>);

impl Drop for Restore {
    fn drop(&mut self) {
        let prev = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = prev);
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let prev = CURRENT.with(|c| c.borrow_mut().replace(self.tenant.clone()));
        let _restore = Restore(prev);
        self.future.as_mut().poll(cx)
    }
}

/// One job's life: whether anyone still waits for it.
#[derive(Debug)]
struct JobState {
    waiting: AtomicBool,
}

/// Says whether the job it was taken in is still wanted; cheap to clone into parallel
/// iterators.
#[derive(Debug, Clone)]
pub struct Probe(Option<Arc<JobState>>);

impl Probe {
    /// True once nobody waits for the job's result any more.
    pub fn cancelled(&self) -> bool {
        self.0.as_ref().is_some_and(|s| !s.waiting.load(Ordering::Relaxed))
    }
}

/// The probe of the job running on this thread (never cancelled outside a job).
pub fn probe() -> Probe {
    Probe(RUNNING.with(|r| r.borrow().clone()))
}

/// True when the job running on this thread is no longer waited for: stop early.
pub fn cancelled() -> bool {
    probe().cancelled()
}

/// Marks the job unwanted when its waiter is dropped before the result came.
struct Waiter(Arc<JobState>);

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.0.waiting.swap(false, Ordering::Relaxed) {
            // Gone before its result: the queues may hold a job nobody wants.
            SWEEP.store(true, Ordering::Relaxed);
        }
    }
}

/// A queued job.
struct Job {
    work: Box<dyn FnOnce() + Send>,
    state: Arc<JobState>,
    tenant: Arc<Tenant>,
}

/// One stream's queue and the CPU time its jobs have used (ns, virtual). Kept while the
/// stream lives, so a queue that empties often keeps its history.
struct StreamQueue {
    vtime: u64,
    jobs: VecDeque<Job>,
    tenant: Weak<Tenant>,
}

/// One caller's streams, the CPU time they have used (ns, virtual), and the virtual time
/// of the stream served last (where a stream that was idle rejoins).
#[derive(Default)]
struct CallerQueue {
    vtime: u64,
    clock: u64,
    streams: HashMap<u64, StreamQueue>,
}

impl CallerQueue {
    fn busy(&self) -> bool {
        self.streams.values().any(|s| !s.jobs.is_empty())
    }
}

#[derive(Default)]
struct Queues {
    callers: HashMap<Arc<str>, CallerQueue>,
    /// The virtual time of the caller served last (where an idle caller rejoins).
    clock: u64,
    queued: usize,
}

static SWEEP: AtomicBool = AtomicBool::new(false);
static SKIPPED: AtomicU64 = AtomicU64::new(0);
static COMPLETED: AtomicU64 = AtomicU64::new(0);
static BUSY_NS: AtomicU64 = AtomicU64::new(0);

fn queues() -> &'static Mutex<Queues> {
    static QUEUES: OnceLock<Mutex<Queues>> = OnceLock::new();
    QUEUES.get_or_init(Mutex::default)
}

fn lock() -> std::sync::MutexGuard<'static, Queues> {
    // A job never runs under the lock, so a poisoned lock still holds consistent queues.
    queues().lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Queues {
    fn push(&mut self, job: Job) {
        let clock = self.clock;
        let caller = self.callers.entry(job.tenant.caller.clone()).or_default();
        if !caller.busy() {
            // Idle time banks no credit.
            caller.vtime = caller.vtime.max(clock);
        }
        let caller_clock = caller.clock;
        let stream = caller.streams.entry(job.tenant.id).or_insert_with(|| StreamQueue {
            vtime: caller_clock,
            jobs: VecDeque::new(),
            tenant: Arc::downgrade(&job.tenant),
        });
        if stream.jobs.is_empty() {
            stream.vtime = stream.vtime.max(caller_clock);
        }
        stream.jobs.push_back(job);
        self.queued += 1;
    }

    /// Takes out every job nobody waits for.
    fn sweep(&mut self) -> Vec<Job> {
        let mut dead = Vec::new();
        for caller in self.callers.values_mut() {
            for stream in caller.streams.values_mut() {
                let (keep, gone): (VecDeque<Job>, VecDeque<Job>) = std::mem::take(&mut stream.jobs)
                    .into_iter()
                    .partition(|j| j.state.waiting.load(Ordering::Relaxed));
                stream.jobs = keep;
                dead.extend(gone);
            }
        }
        self.queued -= dead.len();
        dead
    }

    /// Forgets the queues of streams that have ended and have no work left.
    fn prune(&mut self) {
        for caller in self.callers.values_mut() {
            caller
                .streams
                .retain(|_, s| !s.jobs.is_empty() || s.tenant.strong_count() > 0);
        }
        self.callers.retain(|_, c| !c.streams.is_empty());
    }

    /// The job due next: the least-served busy caller's least-served busy stream's oldest.
    fn pop(&mut self) -> Option<Job> {
        let caller = self.callers.values_mut().filter(|c| c.busy()).min_by_key(|c| c.vtime)?;
        self.clock = self.clock.max(caller.vtime);
        let stream = caller
            .streams
            .values_mut()
            .filter(|s| !s.jobs.is_empty())
            .min_by_key(|s| s.vtime)?;
        caller.clock = caller.clock.max(stream.vtime);
        let job = stream.jobs.pop_front()?;
        self.queued -= 1;
        Some(job)
    }

    /// Charges `ns` of CPU to `tenant` and its caller.
    fn charge(&mut self, tenant: &Tenant, ns: u64) {
        if let Some(caller) = self.callers.get_mut(&tenant.caller) {
            caller.vtime = caller.vtime.saturating_add(ns);
            if let Some(stream) = caller.streams.get_mut(&tenant.id) {
                stream.vtime = stream.vtime.saturating_add(ns);
            }
        }
    }
}

/// Runs the job that is due (called once per submission, on a rayon thread).
fn run_due() {
    let (job, dead) = {
        let mut q = lock();
        let dead = if SWEEP.swap(false, Ordering::Relaxed) {
            q.sweep()
        } else {
            Vec::new()
        };
        let mut dead = dead;
        let mut job = None;
        while let Some(j) = q.pop() {
            if j.state.waiting.load(Ordering::Relaxed) {
                job = Some(j);
                break;
            }
            dead.push(j);
        }
        q.prune();
        (job, dead)
    };
    SKIPPED.fetch_add(dead.len() as u64, Ordering::Relaxed);
    // Dropped outside the lock: a tenant's held memory may go with them.
    drop(dead);
    let Some(job) = job else { return };
    let prev = RUNNING.with(|r| r.borrow_mut().replace(job.state.clone()));
    let start = Instant::now();
    (job.work)();
    let ns = start.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
    RUNNING.with(|r| *r.borrow_mut() = prev);
    BUSY_NS.fetch_add(ns, Ordering::Relaxed);
    COMPLETED.fetch_add(1, Ordering::Relaxed);
    lock().charge(&job.tenant, ns);
    drop(job.tenant);
}

/// Runs `work` on the pool, accounted to the current tenant, without blocking the async
/// reactor. If the returned future is dropped before the job starts, the job never runs.
/// A panic in the work (a bug) comes back as [`CpuError::Panicked`].
pub async fn run<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, CpuError> {
    let (tx, rx) = futures::channel::oneshot::channel();
    let state = Arc::new(JobState {
        waiting: AtomicBool::new(true),
    });
    let waiter = Waiter(state.clone());
    let job = Job {
        work: Box::new(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let _ = tx.send(result);
        }),
        state,
        tenant: current().unwrap_or_else(daemon_tenant),
    };
    lock().push(job);
    rayon::spawn(run_due);
    let out = rx.await;
    // The result is here: the job is no longer "waited for and missing".
    waiter.0.waiting.store(false, Ordering::Relaxed);
    drop(waiter);
    match out {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) | Err(_) => Err(CpuError::Panicked),
    }
}

/// Counters of the pool since start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Jobs queued now.
    pub queued: usize,
    /// Jobs run to the end.
    pub completed: u64,
    /// Jobs dropped unstarted because nobody waited for them any more.
    pub skipped: u64,
    /// Time jobs have run, summed over threads (ns).
    pub busy_ns: u64,
}

/// The pool's counters now.
pub fn stats() -> Stats {
    Stats {
        queued: lock().queued,
        completed: COMPLETED.load(Ordering::Relaxed),
        skipped: SKIPPED.load(Ordering::Relaxed),
        busy_ns: BUSY_NS.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests;
