//! A cold read from a distant Hub (30 ms a CAS request), through the built binary as a person runs
//! it (`mount --daemon`): the mount splits a block's xorb ranges into parts fetched side by side
//! once it has seen the link is slow, and it sees that on the first reconstruction's answer, so
//! even the first blocks of the first read go in parts (they went as one 8 MiB request each,
//! which at 30 ms and one connection's bandwidth is the slowest way to start a read).

mod common;

use common::isolated::mounted_xet_dataset;
use hubfs::local_hub::{FaultSettings, RouteClass};

/// Two cache blocks.
const SIZE: usize = 16 << 20;

/// Parts a block is fetched in on a slow link (`BLOCK_SIZE / budget::PART`).
const PARTS_PER_BLOCK: u64 = 4;

#[test]
fn the_first_blocks_of_a_cold_read_from_a_distant_hub_go_in_parts() {
    let data = common::bytes(SIZE, 61);
    let Some(((_rt, hub, _cli), dir, _mounted)) = mounted_xet_dataset("distant", &[("weights.bin", &data)], &[]) else {
        return;
    };
    let path = dir.join("weights.bin");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), SIZE as u64);
    let slow = FaultSettings {
        latency_ms: 30,
        ..FaultSettings::default()
    };
    for class in [RouteClass::Reconstruction, RouteClass::XorbFetch] {
        hub.set_faults(class, slow.clone()).unwrap();
    }
    hub.reset_stats();

    let all = std::fs::read(&path).unwrap();
    assert!(all == data, "the file equals the Hub's bytes");
    let fetches = hub.stats(RouteClass::XorbFetch).requests;
    let blocks = (SIZE as u64).div_ceil(8 << 20);
    assert!(
        fetches >= blocks * PARTS_PER_BLOCK,
        "{blocks} blocks read cold at 30 ms took {fetches} xorb requests: the first ones went whole"
    );
    let served = hub.stats(RouteClass::XorbFetch).bytes_out;
    assert!(
        served <= SIZE as u64 * 102 / 100,
        "the Hub served {served} xorb bytes for a {SIZE}-byte file: parts overlapped"
    );
}
