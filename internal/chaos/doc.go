// Package chaos proves ringside's membership protocol under faults. It runs
// a local job (internal/localjob: a sidecar and a ring trainer process per
// worker) against an etcd in a process of its own, plays a seeded random
// schedule of faults on it (SIGKILL and SIGSTOP of workers, of the leader,
// of several workers at once, of only the trainer or only the sidecar,
// drains, scale-ups, etcd kills and freezes), records a history of what
// happened (every generation commit, every delivery of a generation to a
// sidecar's trainer API, every eviction, every trainer step, every fault)
// and checks it: with porcupine against a model of the generation register
// (at most one generation per number, numbers only grow, every delivered
// generation was committed as delivered), and directly for the rest (the
// leader of its term commits, no live registration is revoked, every member
// ends on the latest generation, no deadlock, no divergence, no lost step,
// no spurious generation).
//
// Run drives a whole run; Check is the pure checker, tested on histories
// made by hand.
package chaos
