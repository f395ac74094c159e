//! Room taken for a block's load before the load starts. A read or a prefetch takes room, then
//! starts the load a moment later (a prefetch in a task of its own); a read of the same block in
//! between that finds no room of its own would fetch its bytes exactly, and then the load fetches
//! them again. A claim closes that gap: the block counts as loading from the moment room is taken,
//! so that read joins the load, and whichever caller starts the load takes the claimed room.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Admission;

type BlockKey = (Arc<str>, u64);

/// The claimed blocks and their room, each tagged with its claim's id. A leaf lock.
#[derive(Clone, Default)]
pub(super) struct Claims(Arc<parking_lot::Mutex<HashMap<BlockKey, (u64, Admission)>>>);

impl Claims {
    /// Claims the block's load with `room`; a block claimed already keeps its first claim's
    /// room, and this one's is given back.
    pub(super) fn claim(&self, key: &Arc<str>, block: u64, room: Admission) -> Claim {
        static IDS: AtomicU64 = AtomicU64::new(1);
        let id = IDS.fetch_add(1, Ordering::Relaxed);
        let k = (key.clone(), block);
        let mut map = self.0.lock();
        let spare = match map.entry(k.clone()) {
            Entry::Occupied(_) => Some(room),
            Entry::Vacant(v) => {
                v.insert((id, room));
                None
            }
        };
        drop(map);
        drop(spare);
        Claim {
            claims: self.clone(),
            key: k,
            id,
        }
    }

    pub(super) fn contains(&self, k: &BlockKey) -> bool {
        self.0.lock().contains_key(k)
    }

    /// The room a claim of the block holds, for the load that starts now.
    pub(super) fn take(&self, key: &Arc<str>, block: u64) -> Option<Admission> {
        let taken = self.0.lock().remove(&(key.clone(), block));
        taken.map(|(_, room)| room)
    }
}

/// A claim of one block's load (see the module). Dropping it gives back the room if no load took
/// it; a caller keeps it until its own load of the block has ended.
pub struct Claim {
    claims: Claims,
    key: BlockKey,
    id: u64,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut map = self.claims.0.lock();
        let left = match map.get(&self.key) {
            Some((id, _)) if *id == self.id => map.remove(&self.key),
            _ => None,
        };
        drop(map);
        // The room (if no load took it) is given back outside the lock.
        drop(left);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;

    use crate::chunk_store::{BLOCK_SIZE, ChunkStore, Plan};

    /// A store under the smallest budget, and every admission its room gives.
    fn full_store() -> (ChunkStore, Vec<crate::chunk_store::Admission>) {
        let s = ChunkStore::budgeted(Plan::new(96 << 20, 16 << 20), "test");
        let charge = ChunkStore::load_charge(BLOCK_SIZE);
        let taken: Vec<_> = std::iter::from_fn(|| s.budget().try_admit(charge)).collect();
        assert!(taken.len() >= 2, "room for a few blocks");
        (s, taken)
    }

    #[tokio::test]
    async fn a_claimed_block_is_loading_and_its_load_takes_the_claimed_room() {
        let (s, mut taken) = full_store();
        let key: Arc<str> = Arc::from("k");
        let claim = s.claim(&key, 3, taken.pop().unwrap());
        assert!(s.is_loading(&key, 3), "claimed: counts as loading");
        assert!(!s.is_loading(&key, 4), "only the block claimed");
        assert!(
            s.budget().try_admit(ChunkStore::load_charge(BLOCK_SIZE)).is_none(),
            "no room left"
        );
        // A load by another caller (the read that joins) starts at once, with the claim's room.
        let load = s.get_or_fetch(&key, 3, 5, async {
            Ok::<_, std::io::Error>(Bytes::from_static(b"block"))
        });
        let got = tokio::time::timeout(Duration::from_secs(5), load).await;
        assert_eq!(
            &got.expect("took the claimed room, waited for none").unwrap()[..],
            b"block"
        );
        drop(claim);
        assert!(!s.is_loading(&key, 3));
    }

    #[tokio::test]
    async fn an_unused_claim_gives_its_room_back_and_a_second_claim_keeps_the_first() {
        let (s, mut taken) = full_store();
        let key: Arc<str> = Arc::from("k");
        let charge = ChunkStore::load_charge(BLOCK_SIZE);
        let first = s.claim(&key, 1, taken.pop().unwrap());
        let second = s.claim(&key, 1, taken.pop().unwrap());
        // Taken again (and kept), so the budget is full once more.
        let back = s.budget().try_admit(charge);
        assert!(back.is_some(), "the second claim's room was given back at once");
        drop(second);
        assert!(s.is_loading(&key, 1), "the first claim still holds the block");
        assert!(s.budget().try_admit(charge).is_none(), "and its room");
        drop(first);
        assert!(!s.is_loading(&key, 1));
        assert!(
            s.budget().try_admit(charge).is_some(),
            "an unused claim gives its room back"
        );
    }
}
