package sidecar

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ringside/ringside/coordinator"
)

// metrics are the sidecar's Prometheus metrics, on a registry of its own.
type metrics struct {
	reg *prometheus.Registry

	generation      prometheus.Gauge
	worldSize       prometheus.Gauge
	members         *prometheus.GaugeVec
	leader          prometheus.Gauge
	failureToCommit prometheus.Histogram
	rendezvousWait  prometheus.Histogram
	trainerAttached prometheus.Gauge
	trainerSamples  prometheus.Gauge
	gossipMembers   prometheus.GaugeFunc
	gossipSuspects  prometheus.GaugeFunc
	etcdErrors      *prometheus.CounterVec
	apiRequests     *prometheus.CounterVec
	deadPeers       prometheus.Counter
	votes           *prometheus.CounterVec
	socketsReset    prometheus.Counter
	keyReloads      *prometheus.CounterVec
	apiRefused      prometheus.Counter
	invalidRecords  *prometheus.CounterVec
}

// latencyBuckets span 10 ms to ~40 s: detection and recovery times.
var latencyBuckets = prometheus.ExponentialBuckets(0.01, 2, 12)

func newMetrics(gossipMembers, gossipSuspects func() float64) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringside_coordinator_generation",
			Help: "Number of the newest committed generation this member holds.",
		}),
		worldSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringside_coordinator_world_size",
			Help: "World size (ranks) of the newest committed generation.",
		}),
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringside_coordinator_members",
			Help: "Members of the newest generation by state (active, standby).",
		}, []string{"state"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringside_coordinator_leader",
			Help: "1 while this member leads the job, else 0.",
		}),
		failureToCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringside_coordinator_failure_to_generation_seconds",
			Help:    "Time from detecting a dead member to holding the generation without it.",
			Buckets: latencyBuckets,
		}),
		rendezvousWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringside_api_rendezvous_wait_seconds",
			Help:    "How long rendezvous requests waited for their generation.",
			Buckets: latencyBuckets,
		}),
		trainerAttached: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringside_api_trainer_attached",
			Help: "1 while this pod's trainer is attached to the API (an event stream open, heartbeats on time), else 0.",
		}),
		trainerSamples: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringside_trainer_samples_per_second",
			Help: "Samples per second this pod's trainer processed over its last status interval, from its heartbeats (the rate stored in etcd); 0 while it is not attached.",
		}),
		gossipMembers: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ringside_gossip_members",
			Help: "Members alive in this sidecar's gossip view, itself included.",
		}, gossipMembers),
		gossipSuspects: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ringside_gossip_suspects",
			Help: "Members this sidecar's gossip currently suspects.",
		}, gossipSuspects),
		etcdErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringside_etcd_errors_total",
			Help: "Failed etcd operations, by operation.",
		}, []string{"op"}),
		apiRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringside_api_requests_total",
			Help: "Trainer API requests, by handler and status code.",
		}, []string{"handler", "code"}),
		deadPeers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringside_dead_members_total",
			Help: "Deaths of generation members confirmed in etcd (evicted on two votes, or gone).",
		}),
		votes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringside_suspect_votes_total",
			Help: "Votes this sidecar cast against unresponsive members, by outcome (voted, evicted, gone).",
		}, []string{"outcome"}),
		socketsReset: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringside_sockets_reset_total",
			Help: "TCP connections to dead members destroyed.",
		}),
		keyReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringside_gossip_key_reloads_total",
			Help: "Changes of the gossip key file, by result (applied, failed: the keys in use stay).",
		}, []string{"result"}),
		apiRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringside_api_refused_total",
			Help: "Trainer API requests refused because the caller is not this pod's trainer (wrong uid, no or a wrong token).",
		}),
		invalidRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringside_invalid_records_total",
			Help: "Malformed or out-of-bounds values read from etcd or a peer, ignored, by kind (member, generation, vote, status, eviction, gossip, other).",
		}, []string{"kind"}),
	}
	m.reg.MustRegister(m.generation, m.worldSize, m.members, m.leader, m.failureToCommit,
		m.rendezvousWait, m.trainerAttached, m.trainerSamples, m.gossipMembers, m.gossipSuspects, m.etcdErrors, m.apiRequests,
		m.deadPeers, m.votes, m.socketsReset, m.keyReloads, m.apiRefused, m.invalidRecords,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The outcomes known in advance are exported at 0 from the start: an
	// increase() over a series that appears only at its first event misses
	// that event.
	for _, v := range []coordinator.Verdict{coordinator.Voted, coordinator.Evicted, coordinator.Gone} {
		m.votes.WithLabelValues(v.String())
	}
	for _, r := range []string{"applied", "failed"} {
		m.keyReloads.WithLabelValues(r)
	}
	return m
}

// Gatherer exposes the sidecar's metrics, for embedding and tests.
func (a *Agent) Gatherer() prometheus.Gatherer { return a.metrics.reg }
