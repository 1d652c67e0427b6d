//! Every row of the scenario table (docs/ARCHITECTURE.md) through the preset, over hyper and
//! over reqwest, against the fault server on loopback. Attempts are counted by the server.

use courier_cli::scenarios::{Transport, run_all, table};
use courier_faultserver::FaultServer;

async fn run(transport: Transport) {
    let server = FaultServer::start().await.expect("fault server starts");
    let results = run_all(&server, transport).await;
    println!("{}", table(&results));
    assert_eq!(results.len(), 10);
    let failed: Vec<_> = results.iter().filter(|r| !r.pass).collect();
    assert!(failed.is_empty(), "failed rows: {failed:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_table_over_hyper() {
    run(Transport::Hyper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_table_over_reqwest() {
    run(Transport::Reqwest).await;
}
