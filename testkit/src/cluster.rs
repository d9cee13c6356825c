//! What an operator does to a Redis Cluster, done for real to a test's own six-node cluster
//! ([`RedisCluster`]): a planned failover (`CLUSTER FAILOVER` on a replica), a master killed
//! (`SIGKILL`), one slot moved to another master as `redis-cli --cluster reshard` moves it
//! (`SETSLOT IMPORTING/MIGRATING`, `MIGRATE` of its keys, `SETSLOT NODE` everywhere), and the
//! pub/sub connections killed (`CLIENT KILL TYPE pubsub`). Each returns once every live node
//! agrees on the new topology.

use std::time::{Duration, Instant};

use crate::redis::RedisCluster;

/// How long a topology change may take before the test fails.
const SETTLE: Duration = Duration::from_secs(30);

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct NodeLine {
    id: String,
    port: u16,
    master: bool,
    failed: bool,
    /// The master's id, for a replica.
    of: Option<String>,
    /// Slot ranges, inclusive.
    slots: Vec<(u16, u16)>,
}

fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            let port = f[1].split(['@', ':']).nth(1)?.parse().ok()?;
            let flags = f[2];
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|x| (x, x)),
                })
                .collect();
            Some(NodeLine {
                id: f[0].to_owned(),
                port,
                master: flags.contains("master"),
                failed: flags.contains("fail"),
                of: (f[3] != "-").then(|| f[3].to_owned()),
                slots,
            })
        })
        .collect()
}

impl RedisCluster {
    /// The servers still running.
    fn alive(&self) -> impl Iterator<Item = (usize, &crate::redis::RedisProc)> {
        self.nodes.iter().enumerate().filter(|(_, n)| n.running())
    }

    /// The topology as the first running server sees it.
    fn topology(&self) -> Vec<NodeLine> {
        let (_, n) = self.alive().next().expect("a server runs");
        parse_nodes(&n.cli(&["cluster", "nodes"]))
    }

    fn index_of_port(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .expect("a server of this cluster")
    }

    /// The indexes of the servers that are masters serving slots now.
    pub fn masters(&self) -> Vec<usize> {
        self.topology()
            .iter()
            .filter(|l| l.master && !l.failed && !l.slots.is_empty())
            .map(|l| self.index_of_port(l.port))
            .collect()
    }

    /// The hash slot of `key`.
    pub fn slot_of(&self, key: &str) -> u16 {
        let (_, n) = self.alive().next().expect("a server runs");
        n.cli(&["cluster", "keyslot", key])
            .trim()
            .parse()
            .expect("a slot")
    }

    /// The index of the master serving `slot`.
    pub fn owner_of(&self, slot: u16) -> usize {
        let line = self
            .topology()
            .into_iter()
            .find(|l| {
                l.master && !l.failed && l.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
            })
            .expect("every slot is served");
        self.index_of_port(line.port)
    }

    /// A replica of master `master` (an index) in sync with it: waited for, as a replica joins
    /// its master a moment after the cluster is created or a failover ends.
    fn replica_of(&self, master: usize) -> usize {
        let deadline = Instant::now() + SETTLE;
        loop {
            let nodes = self.topology();
            let id = nodes
                .iter()
                .find(|l| l.port == self.nodes[master].port)
                .map(|l| l.id.clone());
            let replica = nodes
                .iter()
                .filter(|l| !l.master && !l.failed && l.of.is_some() && l.of == id)
                .map(|l| self.index_of_port(l.port))
                .find(|i| {
                    self.nodes[*i]
                        .cli(&["info", "replication"])
                        .contains("master_link_status:up")
                });
            if let Some(r) = replica {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "server {master} has no replica in sync: {nodes:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A planned failover of master `master`: its replica takes over (`CLUSTER FAILOVER`), as
    /// a patch or a managed service's maintenance does. Returns the new master's index once
    /// every server sees it and the cluster is ok.
    pub fn failover(&self, master: usize) -> usize {
        let replica = self.replica_of(master);
        let port = self.nodes[replica].port;
        let promoted = |c: &Self| c.topology().iter().any(|l| l.port == port && l.master);
        // A manual failover that does not complete in time (the replica not caught up yet,
        // right after another one) is given up by Redis: asked again, as an operator would.
        for _ in 0..3 {
            let out = self.nodes[replica].cli(&["cluster", "failover"]);
            assert!(out.trim() == "OK", "CLUSTER FAILOVER answered {out}");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && !promoted(self) {
                std::thread::sleep(Duration::from_millis(50));
            }
            if promoted(self) {
                break;
            }
        }
        self.settle(promoted);
        replica
    }

    /// Kills master `master` with `SIGKILL` (its data is gone, persistence being off) and
    /// returns its replica's index once that one took over.
    pub fn kill_master(&mut self, master: usize) -> usize {
        let replica = self.replica_of(master);
        self.nodes[master].kill();
        self.settle(|c| {
            let port = c.nodes[replica].port;
            c.topology().iter().any(|l| l.port == port && l.master)
        });
        replica
    }

    /// Moves `slot` with its keys to master `to` (an index), as a reshard does: importing on
    /// the target, migrating on the source, every key `MIGRATE`d, then the slot assigned on
    /// every master.
    pub fn move_slot(&self, slot: u16, to: usize) {
        let from = self.owner_of(slot);
        if from == to {
            return;
        }
        let nodes = self.topology();
        let id = |i: usize| {
            nodes
                .iter()
                .find(|l| l.port == self.nodes[i].port)
                .expect("a node")
                .id
                .clone()
        };
        let (from_id, to_id) = (id(from), id(to));
        let s = slot.to_string();
        let ok = |out: String, what: &str| assert!(out.trim() == "OK", "{what}: {out}");
        ok(
            self.nodes[to].cli(&["cluster", "setslot", &s, "importing", &from_id]),
            "importing",
        );
        ok(
            self.nodes[from].cli(&["cluster", "setslot", &s, "migrating", &to_id]),
            "migrating",
        );
        loop {
            let keys = self.nodes[from].cli(&["cluster", "getkeysinslot", &s, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let port = self.nodes[to].port.to_string();
            let mut args = vec!["migrate", "127.0.0.1", &port, "", "0", "5000", "keys"];
            args.extend(keys.iter().copied());
            let out = self.nodes[from].cli(&args);
            assert!(
                out.trim() == "OK" || out.trim() == "NOKEY",
                "MIGRATE answered {out}"
            );
        }
        for (_, n) in self.alive() {
            if n.cli(&["role"]).starts_with("master") {
                ok(
                    n.cli(&["cluster", "setslot", &s, "node", &to_id]),
                    "setslot node",
                );
            }
        }
        self.settle(|c| c.owner_of(slot) == to);
    }

    /// Kills every pub/sub connection of every server (`CLIENT KILL TYPE pubsub`): what a
    /// proxy restart or an idle-connection reaper does to subscribers.
    pub fn kill_pubsub_clients(&self) -> usize {
        self.alive()
            .map(|(_, n)| {
                n.cli(&["client", "kill", "type", "pubsub"])
                    .trim()
                    .parse::<usize>()
                    .unwrap_or(0)
            })
            .sum()
    }

    /// Whether every running server sees the same three masters serving slots and a replica
    /// of each: a new cluster has settled.
    pub fn converged(&self) -> bool {
        self.alive().all(|(_, n)| {
            let t = parse_nodes(&n.cli(&["cluster", "nodes"]));
            t.iter().filter(|l| l.master && !l.slots.is_empty()).count() == 3
                && t.iter().filter(|l| !l.master && l.of.is_some()).count() == 3
        })
    }

    /// Waits until `done` holds and every running server reports `cluster_state:ok`.
    fn settle(&self, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + SETTLE;
        loop {
            let ok = done(self)
                && self
                    .alive()
                    .all(|(_, n)| n.cli(&["cluster", "info"]).contains("cluster_state:ok"));
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not settle within {SETTLE:?}:\n{}",
                self.alive()
                    .next()
                    .map(|(_, n)| n.cli(&["cluster", "nodes"]))
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
