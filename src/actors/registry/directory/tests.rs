//! Unit and property tests of the phone directory.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::*;
use crate::domain::ids::WorkspaceId;

/// A phone actor's handle: which actor it is, and whether it still runs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FakeActor {
    n: u32,
    running: bool,
}

impl PhoneHandle for FakeActor {
    fn is_running(&self) -> bool {
        self.running
    }
}

fn actor(n: u32) -> FakeActor {
    FakeActor { n, running: true }
}

const NOW: i64 = 1_700_000_000_000;

fn id(n: u128) -> Uuid {
    Uuid::from_u128(n + 1)
}

fn node(n: u128) -> Uuid {
    Uuid::from_u128(1_000 + n)
}

fn scope(workspace: u128, mode: Mode) -> Scope {
    Scope {
        workspace_id: WorkspaceId::from(Uuid::from_u128(500 + workspace)),
        mode,
    }
}

fn live() -> Scope {
    scope(0, Mode::Live)
}

fn record(n: u128, scope: Scope, number: &str) -> PhoneRecord {
    PhoneRecord {
        id: id(n),
        workspace_id: scope.workspace_id,
        mode: scope.mode,
        phone_number: number.to_string(),
        name: None,
        pace: None,
        created_at: NOW,
        last_seen_at: None,
        line: None,
    }
}

/// Phone `n`, a SIM line of phone `device` on `slot`.
fn line(n: u128, device: u128, slot: i64, number: &str) -> PhoneRecord {
    PhoneRecord {
        line: Some(crate::store::phones::Line {
            device_phone_id: id(device),
            sim_slot: SimSlot::parse(slot).unwrap(),
        }),
        ..record(n, live(), number)
    }
}

#[test]
fn a_device_knows_its_lines_by_slot_until_they_are_unpaired() {
    let mut directory = directory();
    directory.insert(record(0, live(), "+14155550100"));
    directory.insert(line(1, 0, 2, "+14155550101"));
    directory.insert(line(2, 0, 3, "+14155550102"));
    // Read again (a record changed on another node): listed once.
    directory.insert(line(1, 0, 2, "+14155550101"));
    assert_eq!(directory.lines_of(id(0)), vec![id(1), id(2)]);
    assert!(directory.lines_of(id(1)).is_empty(), "a line has no lines");
    let slot = |n| SimSlot::parse(n).unwrap();
    assert_eq!(directory.line_on(id(0), slot(2)), Some(id(1)));
    assert_eq!(directory.line_on(id(0), slot(3)), Some(id(2)));
    assert_eq!(
        directory.line_on(id(0), slot(1)),
        None,
        "the device's own SIM"
    );
    assert!(directory.unpaired(id(1)).is_some());
    assert_eq!(directory.lines_of(id(0)), vec![id(2)]);
    assert_eq!(directory.line_on(id(0), slot(2)), None);
    assert!(directory.unpaired(id(2)).is_some());
    assert!(directory.lines_of(id(0)).is_empty());
}

#[test]
fn a_line_sends_from_its_own_number_while_connected() {
    let mut directory = directory();
    directory.insert(record(0, live(), "+14155550100"));
    directory.insert(line(1, 0, 2, "+14155550101"));
    directory.started(id(1), actor(1));
    // The Registry connects a device's lines on the device's session.
    directory.connected(id(0), 7, NOW);
    directory.connected(id(1), 7, NOW);
    assert_eq!(
        directory.route(live(), "+14155550101", None),
        Ok(Some(Target::Here(id(1))))
    );
    assert_eq!(
        directory.route(live(), "+14155550100", None),
        Ok(Some(Target::Here(id(0))))
    );
    let gone = directory.disconnected(id(1), 7, NOW).unwrap();
    assert!(gone.went_offline);
    assert_eq!(directory.route(live(), "+14155550101", None), Ok(None));
}

fn directory() -> PhoneDirectory<FakeActor> {
    PhoneDirectory::new(Pace::default())
}

/// Pairs phones `ns` with `number` in the live scope and connects each (session = n + 100).
fn connected_phones(directory: &mut PhoneDirectory<FakeActor>, ns: &[u128], number: &str) {
    for n in ns {
        directory.insert(record(*n, live(), number));
        directory.started(id(*n), actor(*n as u32));
        directory.connected(id(*n), *n as u64 + 100, NOW);
    }
}

fn routes(directory: &mut PhoneDirectory<FakeActor>, number: &str, times: usize) -> Vec<Target> {
    (0..times)
        .filter_map(|_| directory.route(live(), number, None).ok().flatten())
        .collect()
}

#[test]
fn sends_go_round_robin_over_the_online_phones_of_the_number() {
    let mut directory = directory();
    connected_phones(&mut directory, &[0, 1, 2], "+15550100");
    directory.insert(record(3, live(), "+15550100")); // offline
    connected_phones(&mut directory, &[4], "+15550199"); // another number
    assert_eq!(
        routes(&mut directory, "+15550100", 6),
        [1, 2, 0, 1, 2, 0].map(|n| Target::Here(id(n)))
    );
}

#[test]
fn no_online_phone_takes_no_send() {
    let mut directory = directory();
    directory.insert(record(0, live(), "+15550100"));
    assert_eq!(directory.route(live(), "+15550100", None), Ok(None));
    assert_eq!(directory.route(live(), "+15550111", None), Ok(None));
}

#[test]
fn a_pinned_device_must_be_of_the_scope_and_number() {
    let mut directory = directory();
    connected_phones(&mut directory, &[0], "+15550100");
    let pinned = Some(id(0));
    assert_eq!(
        directory.route(live(), "+15550100", pinned),
        Ok(Some(Target::Here(id(0))))
    );
    assert_eq!(
        directory.route(live(), "+15550111", pinned),
        Err(RouteError::NumberMismatch)
    );
    assert_eq!(
        directory.route(scope(1, Mode::Live), "+15550100", pinned),
        Err(RouteError::UnknownDevice)
    );
    assert_eq!(
        directory.route(scope(0, Mode::Test), "+15550100", pinned),
        Err(RouteError::UnknownDevice)
    );
    assert_eq!(
        directory.route(live(), "+15550100", Some(id(9))),
        Err(RouteError::UnknownDevice)
    );
    // Pinned and offline: nobody takes it (it waits in the pinned phone's queue).
    directory.disconnected(id(0), 100, NOW);
    assert_eq!(directory.route(live(), "+15550100", pinned), Ok(None));
}

#[test]
fn a_phone_online_on_another_node_takes_sends_there() {
    let mut directory = directory();
    directory.insert(record(0, live(), "+15550100"));
    assert!(!directory.online_elsewhere(id(0), node(1)), "no actor here");
    assert_eq!(
        directory.route(live(), "+15550100", None),
        Ok(Some(Target::Elsewhere(id(0))))
    );
    // A late offline of an earlier node changes nothing.
    directory.offline_elsewhere(id(0), node(2));
    assert!(directory.is_online(id(0)));
    directory.offline_elsewhere(id(0), node(1));
    assert_eq!(directory.route(live(), "+15550100", None), Ok(None));
}

#[test]
fn a_test_mode_send_names_an_online_phone_else_the_first_paired() {
    let mut directory = directory();
    let test = scope(0, Mode::Test);
    assert_eq!(directory.route(test, "+15550100", None), Ok(None));
    directory.insert(record(0, test, "+15550100"));
    directory.insert(record(1, test, "+15550100"));
    assert_eq!(
        directory.route(test, "+15550100", None),
        Ok(Some(Target::Elsewhere(id(0))))
    );
    directory.started(id(1), actor(1));
    directory.connected(id(1), 7, NOW);
    assert_eq!(
        directory.route(test, "+15550100", None),
        Ok(Some(Target::Elsewhere(id(1)))),
        "the simulated phone sends even for a connected one"
    );
}

#[test]
fn connecting_comes_online_once_and_stores_last_seen_at_once() {
    let mut directory = directory();
    directory.insert(record(0, live(), "+15550100"));
    assert_eq!(directory.connected(id(9), 1, NOW), None, "unknown phone");
    let first = directory.connected(id(0), 1, NOW);
    assert_eq!(
        first,
        Some(Connection {
            came_online: true,
            seen: Some(NOW),
            scope: live(),
        })
    );
    // A second transport replaces the first: already online, nothing newer to store.
    let second = directory.connected(id(0), 2, NOW);
    assert_eq!(second.map(|c| (c.came_online, c.seen)), Some((false, None)));
}

#[test]
fn a_replaced_sessions_late_close_keeps_the_phone_online() {
    let mut directory = directory();
    connected_phones(&mut directory, &[0, 1], "+15550100");
    directory.connected(id(0), 2, NOW);
    let late = directory.disconnected(id(0), 100, NOW + 1).unwrap();
    assert!(!late.went_offline);
    assert_eq!(late.seen, Some(NOW + 1));
    assert!(late.reroute_to.is_empty());
    assert!(directory.connected_here(id(0)));
    let gone = directory.disconnected(id(0), 2, NOW + 2).unwrap();
    assert!(gone.went_offline);
    assert_eq!(gone.actor, Some(actor(0)));
    assert_eq!(gone.reroute_to, [id(1)], "its waiting messages move");
    assert_eq!(directory.count_connected_here(), 1);
}

#[test]
fn unpairing_forgets_the_phone_and_names_where_its_messages_go() {
    let mut directory = directory();
    directory.insert(record(0, live(), "+15550100"));
    directory.insert(record(1, live(), "+15550100"));
    connected_phones(&mut directory, &[2], "+15550100");
    directory.started(id(0), actor(0));
    directory.online_elsewhere(id(0), node(1));
    let removed = directory.unpaired(id(0)).unwrap();
    assert_eq!(removed.actor, Some(actor(0)));
    assert_eq!(removed.reroute_to, [id(2), id(1)], "connected ones first");
    assert!(removed.online_elsewhere);
    assert!(!directory.contains(id(0)));
    assert!(!directory.is_online(id(0)));
    assert_eq!(directory.unpaired(id(0)), None);
    assert_eq!(
        routes(&mut directory, "+15550100", 2),
        [Target::Here(id(2)); 2]
    );
}

#[test]
fn a_rotated_token_takes_the_phone_offline_and_keeps_its_actor() {
    let mut directory = directory();
    connected_phones(&mut directory, &[0], "+15550100");
    assert_eq!(directory.token_rotated(id(0)), Some(actor(0)));
    assert!(!directory.is_online(id(0)));
    assert_eq!(directory.running(id(0)), Some(actor(0)));
}

#[test]
fn letting_go_drops_the_transport_and_the_actor() {
    let mut directory = directory();
    connected_phones(&mut directory, &[0], "+15550100");
    assert_eq!(directory.let_go(id(0)), Some(actor(0)));
    assert_eq!(directory.let_go(id(0)), None);
    assert!(!directory.connected_here(id(0)));
    assert!(directory.contains(id(0)), "still paired");
}

#[test]
fn a_stopped_actor_is_started_again_and_owned_needs_a_lease_or_a_transport() {
    let mut directory = directory();
    directory.insert(record(0, live(), "+15550100"));
    assert_eq!(directory.running(id(0)), None);
    directory.started(
        id(0),
        FakeActor {
            n: 0,
            running: false,
        },
    );
    assert_eq!(directory.running(id(0)), None, "stopped: start a new one");
    assert_eq!(directory.owned(id(0), || true), None);
    directory.started(id(0), actor(1));
    assert_eq!(directory.owned(id(0), || true), Some(actor(1)));
    assert_eq!(
        directory.owned(id(0), || false),
        None,
        "no lease, no transport"
    );
    directory.connected(id(0), 1, NOW);
    assert_eq!(directory.owned(id(0), || false), Some(actor(1)));
}

#[test]
fn pace_follows_the_override_else_the_default() {
    let mut directory = directory();
    directory.insert(record(0, live(), "+15550100"));
    assert_eq!(directory.pace_of(id(0)), Some(Pace::default()));
    let slow = Pace::new(1, 10).unwrap();
    assert_eq!(directory.set_pace(id(0), Some(slow)), Some(slow));
    assert_eq!(directory.set_pace(id(0), None), Some(Pace::default()));
    assert_eq!(directory.set_pace(id(9), Some(slow)), None);
}

#[test]
fn a_changed_record_keeps_the_transport() {
    let mut directory = directory();
    connected_phones(&mut directory, &[0], "+15550100");
    let renamed = PhoneRecord {
        name: Some("front desk".into()),
        ..record(0, live(), "+15550100")
    };
    directory.record_changed(renamed);
    assert!(directory.connected_here(id(0)));
    assert_eq!(
        directory.record(id(0)).and_then(|r| r.name.as_deref()),
        Some("front desk")
    );
    directory.record_changed(record(1, live(), "+15550100"));
    assert!(directory.contains(id(1)));
}

#[test]
fn the_cluster_heartbeat_replaces_the_phones_online_elsewhere() {
    let mut directory = directory();
    directory.insert(record(0, live(), "+15550100"));
    directory.insert(record(1, live(), "+15550100"));
    let me = node(0);
    let unknown = directory.online_anywhere([(id(0), node(1)), (id(1), me), (id(7), node(2))], me);
    assert_eq!(unknown, [id(7)]);
    assert!(directory.is_online(id(0)));
    assert!(
        !directory.is_online(id(1)),
        "this node's own entries are skipped"
    );
    let states = directory.states([id(0), id(1), id(7)]);
    assert_eq!(states.len(), 2, "unknown phones have no state");
    assert!(states[&id(0)].online);
}

#[test]
fn last_seen_is_written_when_due_and_everything_newer_on_a_stop() {
    let mut directory = directory();
    directory.insert(record(0, live(), "+15550100"));
    directory.insert(record(1, live(), "+15550100"));
    directory.seen(id(0), NOW);
    assert_eq!(directory.last_seen_due(), [(id(0), NOW)]);
    directory.seen(id(0), NOW + 1_000);
    assert_eq!(
        directory.last_seen_due(),
        [],
        "moved by less than STORE_EVERY"
    );
    assert_eq!(directory.last_seen_newer(), [(id(0), NOW + 1_000)]);
    assert_eq!(
        directory.states([id(0)])[&id(0)].last_seen_at,
        Some(NOW + 1_000)
    );
}

#[test]
fn simulated_phones_are_kept_per_number_and_drained() {
    let mut directory = directory();
    let key = NumberKey::new(scope(0, Mode::Test), "+15550100");
    assert_eq!(directory.simulated(&key), None);
    directory.simulated_started(key.clone(), actor(7));
    assert_eq!(directory.simulated(&key), Some(actor(7)));
    connected_phones(&mut directory, &[0], "+15550100");
    let mut drained: Vec<u32> = directory.drain().into_iter().map(|a| a.n).collect();
    drained.sort();
    assert_eq!(drained, [0, 7]);
    assert_eq!(directory.len(), 0);
    assert_eq!(directory.simulated(&key), None);
}

#[test]
fn last_seen_prefers_the_later_of_live_and_stored() {
    let state = PhoneState {
        online: true,
        last_seen_at: Some(5),
    };
    assert_eq!(PhoneState::last_seen(Some(&state), Some(3)), Some(5));
    assert_eq!(PhoneState::last_seen(Some(&state), Some(9)), Some(9));
    assert_eq!(PhoneState::last_seen(None, None), None);
}

/// Phones `0..PHONES`; phone `n` has number `NUMBERS[n % 2]` in workspace `n / 6`: three
/// phones share each number of workspace 0.
const PHONES: u128 = 8;
const NUMBERS: [&str; 2] = ["+15550100", "+15550101"];

fn workspace_of(n: u128) -> u128 {
    n / 6
}

fn phone_scope(n: u128) -> Scope {
    scope(workspace_of(n), Mode::Live)
}

fn phone_number(n: u128) -> &'static str {
    NUMBERS[(n % 2) as usize]
}

/// One event the registry hears about its phones.
#[derive(Debug, Clone)]
enum Op {
    Pair(u128),
    Unpair(u128),
    Connect {
        n: u128,
        session: u64,
    },
    Disconnect {
        n: u128,
        session: u64,
    },
    TokenRotated(u128),
    LetGo(u128),
    OnlineElsewhere {
        n: u128,
        node: u128,
    },
    OfflineElsewhere {
        n: u128,
        node: u128,
    },
    Heartbeat(Vec<(u128, u128)>),
    /// `times` sends from a number in a workspace, unpinned.
    Route {
        workspace: u128,
        number: usize,
        times: usize,
    },
    RoutePinned {
        n: u128,
        workspace: u128,
        number: usize,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let phone = 0..PHONES;
    prop_oneof![
        3 => phone.clone().prop_map(Op::Pair),
        1 => phone.clone().prop_map(Op::Unpair),
        4 => (phone.clone(), 0..3_u64).prop_map(|(n, session)| Op::Connect { n, session }),
        2 => (phone.clone(), 0..3_u64).prop_map(|(n, session)| Op::Disconnect { n, session }),
        1 => phone.clone().prop_map(Op::TokenRotated),
        1 => phone.clone().prop_map(Op::LetGo),
        1 => (phone.clone(), 1..3_u128).prop_map(|(n, node)| Op::OnlineElsewhere { n, node }),
        1 => (phone.clone(), 1..3_u128).prop_map(|(n, node)| Op::OfflineElsewhere { n, node }),
        1 => proptest::collection::vec((0..PHONES + 1, 0..3_u128), 0..4).prop_map(Op::Heartbeat),
        4 => (0..2_u128, 0..2_usize, 1..7_usize)
            .prop_map(|(workspace, number, times)| Op::Route { workspace, number, times }),
        2 => (phone, 0..2_u128, 0..2_usize)
            .prop_map(|(n, workspace, number)| Op::RoutePinned { n, workspace, number }),
    ]
}

/// The rule written as plainly as possible: a list of paired phones in pairing order, each
/// with its session here; the phones online on other nodes; a turn counter per number.
#[derive(Default)]
struct Model {
    /// Paired phones in pairing order, and the session open here.
    paired: Vec<(u128, Option<u64>)>,
    /// Phones with an actor here.
    actors: HashSet<u128>,
    elsewhere: HashMap<u128, u128>,
    turns: HashMap<(u128, usize), usize>,
}

impl Model {
    fn session(&self, n: u128) -> Option<&Option<u64>> {
        self.paired.iter().find(|(p, _)| *p == n).map(|(_, s)| s)
    }

    fn here(&self, n: u128) -> bool {
        matches!(self.session(n), Some(Some(_)))
    }

    fn online(&self, n: u128) -> bool {
        self.here(n) || self.elsewhere.contains_key(&n)
    }

    fn set_session(&mut self, n: u128, session: Option<u64>) {
        if let Some(entry) = self.paired.iter_mut().find(|(p, _)| *p == n) {
            entry.1 = session;
        }
    }

    /// The phones of a number in pairing order (a re-paired phone keeps its first place).
    fn of_number(&self, workspace: u128, number: usize) -> Vec<u128> {
        self.paired
            .iter()
            .map(|(p, _)| *p)
            .filter(|p| workspace_of(*p) == workspace && (p % 2) as usize == number)
            .collect()
    }

    fn target(&self, n: u128) -> Target {
        match self.here(n) {
            true => Target::Here(id(n)),
            false => Target::Elsewhere(id(n)),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Across any sequence of events: a send goes only to an online phone of its number and
    /// scope, in turn over those online phones (each taking one of every `k` sends); online,
    /// connected and known match the plain model; unpairing and disconnecting name exactly the
    /// other phones of the number.
    #[test]
    fn the_directory_follows_the_rule(ops in proptest::collection::vec(op_strategy(), 1..60)) {
        let mut directory = directory();
        let mut model = Model::default();
        let me = node(0);
        for op in ops {
            match op {
                Op::Pair(n) => {
                    directory.insert(record(n, phone_scope(n), phone_number(n)));
                    // A phone paired again starts over: offline here, no actor.
                    match model.paired.iter_mut().find(|(p, _)| *p == n) {
                        Some(entry) => entry.1 = None,
                        None => model.paired.push((n, None)),
                    }
                    model.actors.remove(&n);
                }
                Op::Unpair(n) => {
                    let removed = directory.unpaired(id(n));
                    let was_elsewhere = model.elsewhere.remove(&n).is_some();
                    prop_assert_eq!(removed.is_some(), model.session(n).is_some());
                    if let Some(removed) = removed {
                        model.paired.retain(|(p, _)| *p != n);
                        prop_assert_eq!(removed.actor.is_some(), model.actors.remove(&n));
                        prop_assert_eq!(removed.online_elsewhere, was_elsewhere);
                        let others = model.of_number(workspace_of(n), (n % 2) as usize);
                        let (mut expected, offline): (Vec<u128>, Vec<u128>) =
                            others.into_iter().partition(|p| model.here(*p));
                        expected.extend(offline);
                        prop_assert_eq!(removed.reroute_to, expected.into_iter().map(id).collect::<Vec<_>>());
                    }
                }
                Op::Connect { n, session } => {
                    if directory.running(id(n)).is_none() {
                        directory.started(id(n), actor(n as u32));
                    }
                    let connection = directory.connected(id(n), session, NOW);
                    prop_assert_eq!(connection.is_some(), model.session(n).is_some());
                    if let Some(connection) = connection {
                        prop_assert_eq!(connection.came_online, !model.here(n));
                        prop_assert_eq!(connection.scope, phone_scope(n));
                        model.set_session(n, Some(session));
                        model.actors.insert(n);
                    }
                }
                Op::Disconnect { n, session } => {
                    let gone = directory.disconnected(id(n), session, NOW);
                    prop_assert_eq!(gone.is_some(), model.session(n).is_some());
                    if let Some(gone) = gone {
                        if model.session(n) == Some(&Some(session)) {
                            model.set_session(n, None);
                        }
                        prop_assert_eq!(gone.went_offline, !model.here(n));
                        prop_assert_eq!(gone.actor.is_some(), model.actors.contains(&n));
                        let expected: Vec<Uuid> = match gone.went_offline && model.actors.contains(&n) {
                            true => model
                                .of_number(workspace_of(n), (n % 2) as usize)
                                .into_iter()
                                .filter(|p| *p != n && model.here(*p))
                                .map(id)
                                .collect(),
                            false => Vec::new(),
                        };
                        prop_assert_eq!(gone.reroute_to, expected);
                    }
                }
                Op::TokenRotated(n) => {
                    let told = directory.token_rotated(id(n));
                    prop_assert_eq!(told.is_some(), model.actors.contains(&n));
                    model.set_session(n, None);
                }
                Op::LetGo(n) => {
                    let stopped = directory.let_go(id(n));
                    prop_assert_eq!(stopped.is_some(), model.actors.remove(&n));
                    model.set_session(n, None);
                }
                Op::OnlineElsewhere { n, node: at } => {
                    let has_actor = directory.online_elsewhere(id(n), node(at));
                    prop_assert_eq!(has_actor, model.actors.contains(&n));
                    model.elsewhere.insert(n, at);
                }
                Op::OfflineElsewhere { n, node: at } => {
                    directory.offline_elsewhere(id(n), node(at));
                    if model.elsewhere.get(&n) == Some(&at) {
                        model.elsewhere.remove(&n);
                    }
                }
                Op::Heartbeat(online) => {
                    // Node 0 is this node: its own entries are skipped.
                    let mut unknown = directory.online_anywhere(
                        online.iter().map(|(n, at)| (id(*n), node(*at))),
                        me,
                    );
                    model.elsewhere = online.iter().filter(|(_, at)| *at != 0).copied().collect();
                    unknown.sort();
                    let mut expected: Vec<Uuid> = model
                        .elsewhere
                        .keys()
                        .filter(|n| model.session(**n).is_none())
                        .map(|n| id(*n))
                        .collect();
                    expected.sort();
                    prop_assert_eq!(unknown, expected);
                }
                Op::Route { workspace, number, times } => {
                    let online: Vec<u128> = model
                        .of_number(workspace, number)
                        .into_iter()
                        .filter(|p| model.online(*p))
                        .collect();
                    let mut picked = HashMap::new();
                    for _ in 0..times {
                        let target = directory.route(scope(workspace, Mode::Live), NUMBERS[number], None);
                        let expected = match online.is_empty() {
                            true => None,
                            false => {
                                let turn = model.turns.entry((workspace, number)).or_insert(0);
                                *turn += 1;
                                let pick = online[*turn % online.len()];
                                Some(model.target(pick))
                            }
                        };
                        prop_assert_eq!(target, Ok(expected));
                        if let Some(target) = expected {
                            *picked.entry(target).or_insert(0_usize) += 1;
                        }
                    }
                    // In turn: no online phone takes two sends before every other took one.
                    if let (Some(most), Some(least)) = (picked.values().max(), picked.values().min()) {
                        let all_picked = picked.len() == online.len();
                        prop_assert!(most - least <= 1 && (all_picked || *most == 1));
                    }
                }
                Op::RoutePinned { n, workspace, number } => {
                    let target = directory.route(scope(workspace, Mode::Live), NUMBERS[number], Some(id(n)));
                    let expected = if model.session(n).is_none() || workspace_of(n) != workspace {
                        Err(RouteError::UnknownDevice)
                    } else if (n % 2) as usize != number {
                        Err(RouteError::NumberMismatch)
                    } else {
                        Ok(model.online(n).then(|| model.target(n)))
                    };
                    prop_assert_eq!(target, expected);
                }
            }

            // Known, online and connected here match the model, phone by phone.
            for n in 0..PHONES {
                prop_assert_eq!(directory.contains(id(n)), model.session(n).is_some());
                prop_assert_eq!(directory.connected_here(id(n)), model.here(n));
                let online = model.session(n).is_some() && model.online(n);
                prop_assert_eq!(directory.states([id(n)]).get(&id(n)).map(|s| s.online), model.session(n).map(|_| online));
                prop_assert_eq!(directory.actor(id(n)).is_some(), model.actors.contains(&n));
            }
            prop_assert_eq!(directory.count_connected_here(), model.paired.iter().filter(|(_, s)| s.is_some()).count());
            prop_assert_eq!(directory.len(), model.paired.len());
        }
    }
}
