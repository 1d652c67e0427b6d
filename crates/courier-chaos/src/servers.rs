//! The fault servers of a run, each its own host to the presets.

use courier_faultserver::FaultServer;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The fault servers, on a thread and runtime of their own so that a busy client cannot
/// starve them (and the other way round).
pub(crate) struct Servers {
    pub(crate) servers: Vec<FaultServer>,
    /// For each server, an instant at or before the one its hits' times count from.
    pub(crate) started: Vec<Instant>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Servers {
    pub(crate) fn start(hosts: usize) -> std::io::Result<Self> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("fault-servers".to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let mut started = Vec::with_capacity(hosts);
                    for _ in 0..hosts {
                        let before = Instant::now();
                        match FaultServer::start().await {
                            Ok(server) => started.push((server, before)),
                            Err(e) => {
                                let _ = ready_tx.send(Err(e));
                                return;
                            }
                        }
                    }
                    let _ = ready_tx.send(Ok(started));
                    let _ = stopped.await;
                });
            })?;
        let started = ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("the fault server thread ended early"))??;
        let (servers, started) = started.into_iter().unzip();
        Ok(Self {
            servers,
            started,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        // Dropping the handles aborts the servers' tasks; then the thread may end.
        self.servers.clear();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
