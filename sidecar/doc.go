// Package sidecar is the per-pod agent: it joins the job as a coordinator
// member, finds dead peers by gossip and has them evicted, resets the
// trainer's TCP connections to a dead peer, drains on preemption, and serves
// the trainer's local API (rendezvous, events, heartbeat, leave, health,
// metrics) over a unix socket. The API's wire types live in trainer/api, so
// trainers and clients share them without linking the agent.
package sidecar
