//! Unit and property tests of a campaign's next step.

use std::collections::BTreeMap;

use proptest::prelude::*;
use uuid::Uuid;

use super::*;

const NOW: i64 = 1_700_000_000_000;

fn id(n: u128) -> MessageId {
    MessageId::from(Uuid::from_u128(n + 1))
}

fn running(open: Vec<(MessageId, MessageStatus)>, pending_left: bool) -> Snapshot {
    Snapshot {
        status: CampaignStatus::Running,
        scheduled_for: None,
        open,
        pending_left,
    }
}

/// A step that read `snapshot` and answered the feed or operation that read asked for.
fn loaded(snapshot: Snapshot) -> (CampaignStep, Vec<Action>) {
    let mut step = CampaignStep::new();
    assert_eq!(step.load(), [Action::Load]);
    let actions = step.loaded(snapshot, NOW);
    (step, actions)
}

#[test]
fn a_running_campaign_with_pending_recipients_fills_its_window() {
    let (mut step, actions) = loaded(running(vec![], true));
    assert_eq!(actions, [Action::Feed { room: FEED_WINDOW }]);
    let ids: Vec<_> = (0..60).map(id).collect();
    let after = step.fed(Fed::Queued { ids, held: None });
    // 60 queued: 40 of room is less than half the window, so it waits for the phone.
    assert_eq!(after, []);
    let sent: Vec<_> = (0..10).map(|n| (id(n), MessageStatus::Sending)).collect();
    assert_eq!(
        step.messages_changed(sent),
        [Action::Feed {
            room: FEED_WINDOW / 2
        }]
    );
}

#[test]
fn only_one_read_or_write_runs_and_what_came_meanwhile_follows_it() {
    let (mut step, actions) = loaded(running(vec![], true));
    assert_eq!(actions, [Action::Feed { room: FEED_WINDOW }]);
    assert!(step.is_busy());
    // A change through the API while the feed runs: read after it.
    assert_eq!(step.load(), []);
    assert_eq!(step.tick(), []);
    assert_eq!(step.fed(Fed::NoPhone), [Action::Load]);
}

#[test]
fn a_campaign_with_nothing_left_completes_then_lets_its_actor_go() {
    let (mut step, actions) = loaded(running(vec![(id(0), MessageStatus::Sending)], false));
    assert_eq!(actions, []);
    assert_eq!(
        step.messages_changed([(id(0), MessageStatus::Delivered)]),
        [Action::Complete]
    );
    assert_eq!(step.op_done(OpDone::Done), [Action::Load]);
    let completed = Snapshot {
        status: CampaignStatus::Completed,
        ..running(vec![], false)
    };
    assert_eq!(step.loaded(completed, NOW), [Action::Finish]);
    assert!(step.is_finished());
    assert_eq!(step.load(), []);
    assert_eq!(step.tick(), []);
}

#[test]
fn a_scheduled_campaign_waits_for_its_time_then_starts() {
    let scheduled = Snapshot {
        status: CampaignStatus::Scheduled,
        scheduled_for: Some(NOW + 5_000),
        open: vec![],
        pending_left: true,
    };
    let (mut step, actions) = loaded(scheduled.clone());
    assert_eq!(actions, [Action::WaitUntil(NOW + 5_000)]);
    assert_eq!(step.load(), [Action::Load]);
    assert_eq!(
        step.loaded(scheduled, NOW + 5_000),
        [Action::StopWaiting, Action::Start]
    );
    assert_eq!(step.op_done(OpDone::Done), [Action::Load]);
}

#[test]
fn a_paused_campaign_idles_without_ticking() {
    let paused = Snapshot {
        status: CampaignStatus::Paused,
        ..running(vec![(id(0), MessageStatus::Queued)], true)
    };
    let (mut step, actions) = loaded(paused);
    assert_eq!(actions, [Action::StopWaiting]);
    assert!(!step.is_live());
    for _ in 0..RESYNC_TICKS * 2 {
        assert_eq!(step.tick(), []);
    }
}

#[test]
fn a_message_that_ended_during_a_read_stays_ended() {
    let mut step = CampaignStep::new();
    step.load();
    // Nothing known yet: a change before the first read is ignored (the read sees it).
    assert_eq!(
        step.messages_changed([(id(1), MessageStatus::Delivered)]),
        []
    );
    let (mut step, _) = loaded(running(vec![(id(0), MessageStatus::Sending)], false));
    assert_eq!(step.tick(), []);
    for _ in 1..RESYNC_TICKS - 1 {
        step.tick();
    }
    assert_eq!(step.tick(), [Action::Load]);
    assert_eq!(
        step.messages_changed([(id(0), MessageStatus::Delivered)]),
        []
    );
    // The read began before the message was sent: it still lists it as open.
    let stale = running(vec![(id(0), MessageStatus::Sending)], false);
    assert_eq!(step.loaded(stale, NOW), [Action::Complete]);
}

#[test]
fn the_daily_quota_makes_it_read_again_and_the_queued_quota_wait() {
    let (mut step, _) = loaded(running(vec![], true));
    let held = Fed::Queued {
        ids: vec![id(0)],
        held: Some(Quota::TestMessagesPerDay),
    };
    assert_eq!(step.fed(held), [Action::Load]);
    let (mut step, _) = loaded(running(vec![], true));
    let held = Fed::Queued {
        ids: vec![id(0)],
        held: Some(Quota::QueuedMessages),
    };
    assert_eq!(step.fed(held), []);
}

#[test]
fn a_lost_lease_or_a_deleted_campaign_finishes_once() {
    let (mut step, _) = loaded(running(vec![], true));
    assert_eq!(step.fed(Fed::LeaseLost), [Action::Finish]);
    assert_eq!(step.load(), []);
    let mut step = CampaignStep::new();
    step.load();
    assert_eq!(step.gone(), [Action::Finish]);
    assert_eq!(step.gone(), []);
}

#[test]
fn a_restart_forgets_what_ran_and_reads_again() {
    let (mut step, _) = loaded(running(vec![], true));
    assert!(step.is_busy());
    step.restart();
    assert!(!step.is_busy());
    assert_eq!(step.load(), [Action::Load]);
    step.stop();
    assert_eq!(step.load(), []);
}

// The model: the database the actor reads, and the one read or write in flight.

/// What the database holds of the campaign.
#[derive(Debug, Clone)]
struct Db {
    status: CampaignStatus,
    scheduled_for: Option<i64>,
    pending: usize,
    messages: BTreeMap<u128, MessageStatus>,
    next: u128,
}

impl Db {
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            status: self.status,
            scheduled_for: self.scheduled_for,
            open: self
                .messages
                .iter()
                .filter(|(_, s)| !s.is_terminal())
                .map(|(n, s)| (id(*n), *s))
                .collect(),
            pending_left: self.pending > 0,
        }
    }

    fn queued(&self) -> usize {
        let queued = self.messages.values();
        queued.filter(|s| **s == MessageStatus::Queued).count()
    }

    fn nothing_left(&self) -> bool {
        self.pending == 0 && self.messages.values().all(|s| s.is_terminal())
    }
}

/// A read or write the actor started and the test has not answered yet.
#[derive(Debug, Clone)]
enum InFlight {
    /// A read, as of when it began.
    Load(Snapshot),
    Start,
    Feed {
        room: usize,
    },
    Complete,
}

#[derive(Debug, Clone)]
enum Op {
    /// Answers what is in flight; `choice` picks a failure now and then.
    Answer {
        choice: u8,
    },
    /// The `k`-th open message moves on (queued → sending → sent or failed).
    Change {
        k: usize,
        fail: bool,
    },
    Tick,
    Pause,
    Resume,
    Cancel,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => any::<u8>().prop_map(|choice| Op::Answer { choice }),
        6 => (0..200usize, any::<bool>()).prop_map(|(k, fail)| Op::Change { k, fail: fail && k % 4 == 0 }),
        3 => Just(Op::Tick),
        1 => Just(Op::Pause),
        1 => Just(Op::Resume),
        1 => Just(Op::Cancel),
    ]
}

/// The actor as the test drives it, checking the rules on every action.
struct Harness {
    step: CampaignStep,
    db: Db,
    now: i64,
    in_flight: Option<InFlight>,
    timer: Option<i64>,
    finished: bool,
    lease_lost: bool,
}

impl Harness {
    fn apply(&mut self, actions: Vec<Action>) -> Result<(), TestCaseError> {
        for action in actions {
            prop_assert!(!self.finished, "{action:?} after Finish");
            match action {
                Action::WaitUntil(at) => self.timer = Some(at),
                Action::StopWaiting => self.timer = None,
                Action::Finish => self.finished = true,
                io => {
                    prop_assert!(self.in_flight.is_none(), "{io:?} while one runs");
                    prop_assert!(self.step.is_busy());
                    self.in_flight = Some(match io {
                        Action::Load => InFlight::Load(self.db.snapshot()),
                        Action::Start => {
                            prop_assert!(self.db.scheduled_for.is_none_or(|at| at <= self.now));
                            InFlight::Start
                        }
                        Action::Feed { room } => {
                            prop_assert!((FEED_WINDOW / 2..=FEED_WINDOW).contains(&room));
                            InFlight::Feed { room }
                        }
                        _ => {
                            // Nothing is completed while a recipient or a message is open.
                            prop_assert!(self.db.nothing_left(), "completed too early");
                            InFlight::Complete
                        }
                    });
                }
            }
        }
        Ok(())
    }

    fn answer(&mut self, choice: u8) -> Result<(), TestCaseError> {
        let Some(in_flight) = self.in_flight.take() else {
            return Ok(());
        };
        let lost = choice == u8::MAX;
        let actions = match in_flight {
            InFlight::Load(snapshot) => self.step.loaded(snapshot, self.now),
            InFlight::Start | InFlight::Complete if lost => {
                self.lease_lost = true;
                self.step.op_done(OpDone::LeaseLost)
            }
            InFlight::Start => {
                if self.db.status == CampaignStatus::Scheduled {
                    self.db.status = CampaignStatus::Running;
                }
                self.step.op_done(OpDone::Done)
            }
            InFlight::Complete => {
                if self.db.status == CampaignStatus::Running && self.db.nothing_left() {
                    self.db.status = CampaignStatus::Completed;
                }
                self.step.op_done(OpDone::Done)
            }
            InFlight::Feed { room } => {
                let fed = if lost {
                    self.lease_lost = true;
                    Fed::LeaseLost
                } else if self.db.status != CampaignStatus::Running {
                    Fed::Stopped
                } else if choice % 11 == 1 {
                    Fed::NoPhone
                } else if choice % 13 == 2 {
                    Fed::Failed
                } else if self.db.pending == 0 {
                    Fed::Exhausted
                } else {
                    let n = room.min(self.db.pending).min(usize::from(choice % 64) + 1);
                    self.db.pending -= n;
                    let ids = (0..n)
                        .map(|_| {
                            self.db.next += 1;
                            self.db.messages.insert(self.db.next, MessageStatus::Queued);
                            id(self.db.next)
                        })
                        .collect();
                    prop_assert!(self.db.queued() <= FEED_WINDOW, "window overfilled");
                    Fed::Queued { ids, held: None }
                };
                self.step.fed(fed)
            }
        };
        self.apply(actions)
    }

    fn change(&mut self, k: usize, fail: bool) -> Result<(), TestCaseError> {
        let open: Vec<u128> = (self.db.messages.iter())
            .filter(|(_, s)| !s.is_terminal())
            .map(|(n, _)| *n)
            .collect();
        if open.is_empty() {
            return Ok(());
        }
        let n = open[k % open.len()];
        let status = match (self.db.messages[&n], fail) {
            (_, true) => MessageStatus::Failed,
            (MessageStatus::Queued, false) => MessageStatus::Sending,
            _ => MessageStatus::Delivered,
        };
        self.db.messages.insert(n, status);
        let actions = self.step.messages_changed([(id(n), status)]);
        self.apply(actions)
    }

    fn tick(&mut self) -> Result<(), TestCaseError> {
        self.now += 1_000;
        if let Some(at) = self.timer
            && at <= self.now
        {
            self.timer = None;
            let actions = self.step.load();
            self.apply(actions)?;
        }
        let actions = self.step.tick();
        self.apply(actions)
    }

    fn control(&mut self, op: &Op) -> Result<(), TestCaseError> {
        use CampaignStatus::*;
        self.db.status = match (op, self.db.status) {
            (Op::Pause, Running | Scheduled) => Paused,
            (Op::Resume, Paused) => Running,
            (Op::Cancel, Running | Scheduled | Paused) => Canceled,
            (_, status) => status,
        };
        let actions = self.step.load();
        self.apply(actions)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Across any sequence of events: one read or write at a time, the window never
    /// overfills, nothing completes early, nothing happens after Finish; and once the events
    /// stop and every message is sent, the campaign completes (or ends as canceled) and its
    /// actor is let go.
    #[test]
    fn the_campaign_follows_the_rule(
        recipients in 0..300usize,
        scheduled in proptest::option::of(0..20_000i64),
        ops in proptest::collection::vec(op_strategy(), 0..200),
    ) {
        let mut h = Harness {
            step: CampaignStep::new(),
            db: Db {
                status: if scheduled.is_some() { CampaignStatus::Scheduled } else { CampaignStatus::Running },
                scheduled_for: scheduled.map(|ms| NOW + ms),
                pending: recipients,
                messages: BTreeMap::new(),
                next: 0,
            },
            now: NOW,
            in_flight: None,
            timer: None,
            finished: false,
            lease_lost: false,
        };
        let actions = h.step.load();
        h.apply(actions)?;
        for op in &ops {
            match op {
                Op::Answer { choice } => h.answer(*choice)?,
                Op::Change { k, fail } => h.change(*k, *fail)?,
                Op::Tick => h.tick()?,
                Op::Pause | Op::Resume | Op::Cancel => h.control(op)?,
            }
        }
        // Drain: everything answers well, every message is sent, a paused campaign resumes.
        for _ in 0..10_000 {
            if h.finished {
                break;
            }
            if h.in_flight.is_some() {
                h.answer(0)?;
            } else if h.db.messages.values().any(|s| !s.is_terminal()) {
                h.change(0, false)?;
            } else if h.db.status == CampaignStatus::Paused {
                h.control(&Op::Resume)?;
            } else {
                h.tick()?;
            }
        }
        prop_assert!(h.finished, "the campaign never finished: {:?}", h.db.status);
        prop_assert!(
            h.lease_lost
                || matches!(h.db.status, CampaignStatus::Completed | CampaignStatus::Canceled)
        );
        if h.db.status == CampaignStatus::Completed {
            prop_assert_eq!(h.db.pending, 0);
        }
    }
}
