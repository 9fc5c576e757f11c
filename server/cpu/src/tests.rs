//! The pool's contracts, on the real rayon pool: results and panics, jobs nobody waits for
//! never run, fair shares between streams and between callers, held things outlive jobs.

use super::*;
use futures::FutureExt;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc;
use std::time::Duration;

/// The pool is global: tests that occupy every worker take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Occupies every worker until the returned sender is dropped; returns once all have started.
fn occupy_workers() -> (mpsc::Sender<()>, Vec<std::thread::JoinHandle<()>>) {
    let n = rayon::current_num_threads();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = Arc::new(Mutex::new(go_rx));
    let (started_tx, started_rx) = mpsc::channel();
    let blocker = Tenant::new("blockers");
    let handles = (0..n)
        .map(|_| {
            let (go_rx, started_tx, blocker) = (go_rx.clone(), started_tx.clone(), blocker.clone());
            std::thread::spawn(move || {
                futures::executor::block_on(scope(
                    blocker,
                    run(move || {
                        started_tx.send(()).unwrap();
                        // Wait until the test drops the sender.
                        let _ = go_rx.lock().unwrap().recv();
                    }),
                ))
                .unwrap();
            })
        })
        .collect();
    for _ in 0..n {
        started_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("every worker started");
    }
    (go_tx, handles)
}

#[test]
fn runs_work_and_survives_a_panic() {
    assert_eq!(futures::executor::block_on(run(|| 6 * 7)), Ok(42));
    let failed = futures::executor::block_on(run(|| -> u32 { panic!("a bug") }));
    assert_eq!(failed, Err(CpuError::Panicked));
    assert_eq!(futures::executor::block_on(run(|| 1)), Ok(1));
}

#[test]
fn a_job_nobody_waits_for_never_runs() {
    let _g = serial();
    let skipped = stats().skipped;
    let (go, blockers) = occupy_workers();
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..20 {
        let ran = ran.clone();
        let mut job = Box::pin(scope(
            Tenant::new("gone"),
            run(move || {
                ran.fetch_add(1, Ordering::SeqCst);
            }),
        ));
        // Queued (every worker is busy), then its waiter goes away.
        assert!((&mut job).now_or_never().is_none());
        drop(job);
    }
    drop(go);
    for b in blockers {
        b.join().unwrap();
    }
    // Something that is waited for still runs after them.
    assert_eq!(futures::executor::block_on(run(|| 5)), Ok(5));
    assert_eq!(ran.load(Ordering::SeqCst), 0, "no cancelled job ran");
    assert!(stats().skipped >= skipped + 20, "the skipped jobs are counted");
}

#[test]
fn a_running_job_sees_its_waiter_go() {
    let _g = serial();
    let (seen_tx, seen_rx) = mpsc::channel();
    let (started_tx, started_rx) = mpsc::channel();
    let mut job = Box::pin(run(move || {
        started_tx.send(()).unwrap();
        let probe = probe();
        let t = Instant::now();
        while !probe.cancelled() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        seen_tx.send(cancelled()).unwrap();
    }));
    assert!((&mut job).now_or_never().is_none());
    started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    drop(job);
    assert!(
        seen_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        "cancelled() saw it"
    );
    assert!(!cancelled(), "outside a job nothing is cancelled");
}

/// Queues `jobs` jobs of `ms` each for every (caller, stream) given, behind busy workers,
/// then releases them; returns the order in which the streams' jobs finished.
fn finish_order(tenants: &[(Arc<Tenant>, usize)], ms: u64) -> Vec<usize> {
    let (go, blockers) = occupy_workers();
    let done = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    // Every stream's jobs are queued before any runs, heavy ones first (FIFO would run
    // them first).
    for (k, (tenant, jobs)) in tenants.iter().enumerate() {
        for _ in 0..*jobs {
            let done = done.clone();
            let mut f = Box::pin(scope(
                tenant.clone(),
                run(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    done.lock().unwrap().push(k);
                }),
            ));
            assert!((&mut f).now_or_never().is_none());
            waiters.push(f);
        }
    }
    drop(go);
    futures::executor::block_on(futures::future::join_all(waiters));
    for b in blockers {
        b.join().unwrap();
    }
    Arc::try_unwrap(done).unwrap().into_inner().unwrap()
}

#[test]
fn a_light_stream_is_served_beside_a_heavy_one() {
    let _g = serial();
    let heavy = Tenant::new("alice");
    let light = Tenant::new("alice");
    let order = finish_order(&[(heavy, 60), (light.clone(), 6)], 2);
    let last_light = order.iter().rposition(|&k| k == 1).unwrap();
    // Alternating, the light stream's 6 jobs are done within the first ~12 + workers.
    let bound = 12 + 2 * rayon::current_num_threads();
    assert!(
        last_light < bound,
        "light stream's last job finished {last_light}th of {} (FIFO: 65th)",
        order.len()
    );
}

#[test]
fn a_caller_with_many_streams_gets_one_callers_share() {
    let _g = serial();
    let mut tenants: Vec<(Arc<Tenant>, usize)> = (0..6).map(|_| (Tenant::new("many"), 10)).collect();
    tenants.push((Tenant::new("one"), 10));
    let order = finish_order(&tenants, 2);
    let last_one = order.iter().rposition(|&k| k == 6).unwrap();
    // Per stream it would be served 1/7 of the time (last job near 70th); per caller 1/2.
    let bound = 20 + 2 * rayon::current_num_threads();
    assert!(
        last_one < bound,
        "the single-stream caller's last job finished {last_one}th of {}",
        order.len()
    );
}

#[test]
fn what_a_tenant_holds_outlives_its_running_jobs() {
    let _g = serial();
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let released = Arc::new(AtomicBool::new(false));
    let tenant = Tenant::new("holder");
    tenant.hold(Box::new(Flag(released.clone())));
    let (started_tx, started_rx) = mpsc::channel();
    let (finish_tx, finish_rx) = mpsc::channel::<()>();
    let mut job = Box::pin(scope(
        tenant.clone(),
        run(move || {
            started_tx.send(()).unwrap();
            let _ = finish_rx.recv_timeout(Duration::from_secs(10));
        }),
    ));
    assert!((&mut job).now_or_never().is_none());
    started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    // The stream ends: its future and its own handle go, the job still runs.
    drop(job);
    drop(tenant);
    std::thread::sleep(Duration::from_millis(20));
    assert!(!released.load(Ordering::SeqCst), "held while the job runs");
    drop(finish_tx);
    let t = Instant::now();
    while !released.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(released.load(Ordering::SeqCst), "released once the job ended");
}

#[test]
fn scope_sets_and_restores_the_current_tenant() {
    assert!(current().is_none());
    let t = Tenant::new("bob");
    let seen = futures::executor::block_on(scope(t.clone(), async { current().map(|c| c.id) }));
    assert_eq!(seen, Some(t.id));
    assert!(current().is_none());
    assert_eq!(t.caller(), "bob");
}
