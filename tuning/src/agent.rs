//! Agents: a loop body with a duty cycle, and the runner that drives it (Aeron's `Agent` / `AgentRunner`).
//!
//! An [`Agent`] owns its state and does one bounded pass of its work per [`Agent::do_work`] call (a *duty
//! cycle*), returning how many units of work it did: 0 says it found nothing to do, so the runner lets the
//! [`IdleStrategy`] idle one step (spin, yield or park); anything else resets the strategy. Because an agent never
//! blocks inside `do_work` and never owns its thread, the same agent runs on a dedicated, pinned thread in
//! production ([`run_agent`]) and is stepped by hand, beside other agents, on one thread in a test.
//!
//! The runner itself allocates nothing, makes no syscall beyond what the idle strategy does when idle
//! ([`IdleStrategy::BusySpin`]: none) and logs nothing: a hot agent stays hot under it.

use crate::idle::{IdleStrategy, Idler};

/// A unit of work with a duty cycle. See the module docs.
pub trait Agent {
    /// A short name for the agent's role, used for its thread's name (at most 15 bytes show in `top`/`ps` on
    /// Linux).
    fn role_name(&self) -> &str;

    /// One duty cycle: does the work that is ready, without blocking, and returns how many units it did
    /// (records, messages, completions); 0 means it was idle.
    fn do_work(&mut self) -> usize;

    /// Whether the agent has finished: the runner stops and calls `do_work` no more.
    fn is_done(&self) -> bool;
}

/// What a runner did, for tests and end reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Calls to [`Agent::do_work`].
    pub duty_cycles: u64,
    /// Of those, the ones that returned 0 (each followed by one idle step).
    pub idle_cycles: u64,
    /// The sum of what `do_work` returned.
    pub work: u64,
}

/// Runs `agent` on the calling thread until it [is done](Agent::is_done): `do_work`, then
/// [`Idler::idle`]`(work)`, again and again. Returns the duty-cycle counts.
pub fn run_agent<A: Agent + ?Sized>(agent: &mut A, idle: IdleStrategy) -> RunStats {
    run_agent_until(agent, idle, |_| false)
}

/// [`run_agent`] that also stops, before the next duty cycle, as soon as `stop(agent)` holds. For an agent with
/// phases that want different idle strategies (run the first phase until it ends, then the rest under another
/// strategy), or a runner that must also watch something outside the agent.
pub fn run_agent_until<A: Agent + ?Sized>(
    agent: &mut A,
    idle: IdleStrategy,
    mut stop: impl FnMut(&A) -> bool,
) -> RunStats {
    let mut idler = Idler::new(idle);
    let mut stats = RunStats::default();
    while !agent.is_done() && !stop(agent) {
        let work = agent.do_work();
        stats.duty_cycles += 1;
        stats.work += work as u64;
        stats.idle_cycles += (work == 0) as u64; // no branch beside the idler's own
        idler.idle(work);
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Works on every third duty cycle (2 units), is idle on the others, and is done after `cycles` cycles.
    struct Toy {
        cycles: u64,
        done_cycles: u64,
    }

    impl Agent for Toy {
        fn role_name(&self) -> &str {
            "toy"
        }
        fn do_work(&mut self) -> usize {
            self.cycles += 1;
            if self.cycles.is_multiple_of(3) {
                2
            } else {
                0
            }
        }
        fn is_done(&self) -> bool {
            self.cycles >= self.done_cycles
        }
    }

    #[test]
    fn the_runner_calls_do_work_until_done_and_counts_each_cycle() {
        let mut toy = Toy { cycles: 0, done_cycles: 10 };
        let stats = run_agent(&mut toy, IdleStrategy::BusySpin);
        // cycles 3, 6, 9 worked (2 each); 1, 2, 4, 5, 7, 8, 10 were idle
        assert_eq!(stats, RunStats { duty_cycles: 10, idle_cycles: 7, work: 6 });
        assert_eq!(toy.cycles, 10);
        assert_eq!(toy.role_name(), "toy");
        // a done agent is not stepped again
        assert_eq!(run_agent(&mut toy, IdleStrategy::BusySpin), RunStats::default());
    }

    #[test]
    fn run_until_stops_before_the_cycle_the_predicate_rules_out_and_the_rest_runs_later() {
        let mut toy = Toy { cycles: 0, done_cycles: 12 };
        let first = run_agent_until(&mut toy, IdleStrategy::SpinThenYield { spins: 1 }, |t| t.cycles == 4);
        assert_eq!(first, RunStats { duty_cycles: 4, idle_cycles: 3, work: 2 });
        let backoff = IdleStrategy::Backoff { spins: 1, yields: 1, max_park: Duration::from_micros(4) };
        let rest = run_agent(&mut toy, backoff);
        // cycles 5..=12: 6, 9 and 12 worked
        assert_eq!(rest, RunStats { duty_cycles: 8, idle_cycles: 5, work: 6 });
        assert!(toy.is_done());
    }

    #[test]
    fn agents_are_object_safe_so_a_runner_can_hold_several_kinds() {
        let mut a = Toy { cycles: 0, done_cycles: 3 };
        let mut b = Toy { cycles: 0, done_cycles: 6 };
        let agents: [&mut dyn Agent; 2] = [&mut a, &mut b];
        let total: u64 = agents.into_iter().map(|ag| run_agent(ag, IdleStrategy::BusySpin).duty_cycles).sum();
        assert_eq!(total, 9);
    }
}
