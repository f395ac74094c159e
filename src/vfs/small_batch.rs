//! A batch of small files whose request names only the files no cache tier holds. A folder's batch
//! used to be requested as soon as it was picked, so a node whose files were all on its disk or
//! in the shared tier still asked the Hub for a Xet token and a batch reconstruction.
//!
//! Each file of a batch is loaded through the chunk store as any block is (memory, disk, shared
//! tier); only a load that misses them all asks the batch for its file (`Member::want`), and a
//! load that found it lets go of its stake unasked. A request goes out once every member has done
//! one or the other, or [`GATHER`] after the first want while some are still looking (a block
//! another node claimed keeps its load waiting for up to the claim wait, and nodes claiming each
//! other's files must not wait on each other). Files wanted after a request went out go in the
//! next one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::remote::FileMeta;

/// Content of a request's files by content key (empty when it failed).
type Answer = Arc<HashMap<Arc<str>, Bytes>>;

/// Makes one request for the files given (`Remote::fetch_small_batch` in a mount).
pub(super) type Request = Box<dyn Fn(Vec<FileMeta>) -> BoxFuture<'static, HashMap<Arc<str>, Bytes>> + Send + Sync>;

/// How long a request waits for members still looking once a file is wanted.
const GATHER: Duration = Duration::from_millis(200);

/// One batch's members and the requests made for them.
pub(super) struct Gather(Arc<Inner>);

struct Inner {
    request: Request,
    /// A leaf lock, never held across an `.await`.
    round: Mutex<Round>,
}

/// The request being gathered.
#[derive(Default)]
struct Round {
    /// Members that have neither wanted their file nor found it.
    undecided: usize,
    /// Files wanted for this request, and where its answer goes.
    wanted: Vec<FileMeta>,
    answer: Option<watch::Sender<Option<Answer>>>,
    /// Requests sent so far: the timer of an earlier one does not send this one.
    sent: u64,
    timer: bool,
}

impl Gather {
    /// A batch of `members` files, whose requests `request` makes.
    pub(super) fn new(request: Request, members: usize) -> Gather {
        Gather(Arc::new(Inner {
            request,
            round: Mutex::new(Round {
                undecided: members,
                ..Round::default()
            }),
        }))
    }

    /// The stake of one member: wanted (`Member::want`) or dropped unasked (found elsewhere).
    pub(super) fn member(&self) -> Member {
        Member(Some(self.0.clone()))
    }
}

/// A member's stake in its batch.
pub(super) struct Member(Option<Arc<Inner>>);

impl Member {
    /// The caches lack `file`: its bytes from the request it goes into, or `None` when that
    /// answer lacks them (the caller fetches it alone).
    pub(super) async fn want(mut self, file: &FileMeta) -> Option<Bytes> {
        let inner = self.0.take()?;
        let mut rx = inner.want(file.clone());
        let answer = rx.wait_for(|a| a.is_some()).await.ok()?.clone()?;
        answer.get(&file.id.key()).cloned()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(inner) = self.0.take() {
            inner.found();
        }
    }
}

impl Inner {
    fn want(self: &Arc<Self>, file: FileMeta) -> watch::Receiver<Option<Answer>> {
        let mut r = self.round.lock();
        r.undecided = r.undecided.saturating_sub(1);
        r.wanted.push(file);
        let rx = r.answer.get_or_insert_with(|| watch::channel(None).0).subscribe();
        if r.undecided == 0 {
            self.send(&mut r);
        } else if !r.timer
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            r.timer = true;
            let (this, round) = (self.clone(), r.sent);
            rt.spawn(async move {
                tokio::time::sleep(GATHER).await;
                let mut r = this.round.lock();
                if r.sent == round {
                    this.send(&mut r);
                }
            });
        }
        rx
    }

    /// A member found its file in a cache tier (or was dropped): one fewer to wait for.
    fn found(&self) {
        let mut r = self.round.lock();
        r.undecided = r.undecided.saturating_sub(1);
        if r.undecided == 0 && !r.wanted.is_empty() {
            self.send(&mut r);
        }
    }

    /// Sends the request gathered so far (under the round's lock; the request runs in a task).
    fn send(&self, r: &mut Round) {
        r.timer = false;
        let Some(tx) = r.answer.take() else { return };
        let files = std::mem::take(&mut r.wanted);
        r.sent += 1;
        // Without a runtime (shutting down) the answer is dropped: wanters fetch alone.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let request = (self.request)(files);
        rt.spawn(async move {
            let _ = tx.send(Some(Arc::new(request.await)));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::remote::ContentId;

    fn file(i: u8) -> FileMeta {
        FileMeta {
            remote_path: format!("d/{i}"),
            commit: Arc::from("c"),
            size: 1,
            id: ContentId::Xet(format!("{i:064x}")),
            sha256: None,
            last_commit: None,
        }
    }

    /// A batch of `members` whose requests are recorded (the files each named) and answered.
    fn recorded(members: usize) -> (Gather, Arc<Mutex<Vec<Vec<u8>>>>) {
        let log: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let l = log.clone();
        let request: Request = Box::new(move |files: Vec<FileMeta>| {
            l.lock()
                .push(files.iter().map(|f| f.remote_path[2..].parse().unwrap()).collect());
            let answer = files
                .iter()
                .map(|f| (f.id.key(), Bytes::from(f.remote_path.clone())))
                .collect();
            Box::pin(async move { answer })
        });
        (Gather::new(request, members), log)
    }

    #[tokio::test]
    async fn a_request_names_only_the_files_the_caches_lack() {
        let (g, log) = recorded(4);
        let (m0, m1, m2, m3) = (g.member(), g.member(), g.member(), g.member());
        drop(m1);
        let a = tokio::spawn(async move { m0.want(&file(0)).await });
        let b = tokio::spawn(async move { m2.want(&file(2)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(log.lock().is_empty(), "a member is still looking: the request waits");
        drop(m3);
        assert_eq!(a.await.unwrap().as_deref(), Some(&b"d/0"[..]));
        assert_eq!(b.await.unwrap().as_deref(), Some(&b"d/2"[..]));
        assert_eq!(*log.lock(), vec![vec![0, 2]], "one request, for the two files wanted");
    }

    #[tokio::test]
    async fn files_all_found_make_no_request() {
        let (g, log) = recorded(3);
        let members: Vec<Member> = (0..3).map(|_| g.member()).collect();
        drop(members);
        drop(g);
        tokio::time::sleep(GATHER * 2).await;
        assert!(log.lock().is_empty());
    }

    #[tokio::test]
    async fn a_member_still_looking_holds_the_request_up_for_the_gather_time_only() {
        let (g, log) = recorded(3);
        let (m0, m1, _looking) = (g.member(), g.member(), g.member());
        let t = std::time::Instant::now();
        let a = tokio::spawn(async move { m0.want(&file(0)).await });
        assert_eq!(a.await.unwrap().as_deref(), Some(&b"d/0"[..]));
        let waited = t.elapsed();
        assert!(waited >= GATHER && waited < GATHER * 4, "{waited:?}");
        // Wanted after that request went out: the next one.
        assert_eq!(m1.want(&file(1)).await.as_deref(), Some(&b"d/1"[..]));
        assert_eq!(*log.lock(), vec![vec![0], vec![1]]);
    }
}
