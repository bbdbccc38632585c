package sidecar

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringside/ringside/telemetry"

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
	trainerStep     prometheus.Gauge
	trainerStepTime prometheus.Gauge
	trainerGen      prometheus.Gauge
	trainerSkipped  prometheus.Counter
	gossipMembers   prometheus.GaugeFunc
	gossipSuspects  prometheus.GaugeFunc
	etcdErrors      *prometheus.CounterVec
	apiRequests     *prometheus.CounterVec
	deadPeers       prometheus.Counter
	votes           *prometheus.CounterVec
	socketsReset    prometheus.Counter
	stalledChecks   prometheus.Counter
	shed            *prometheus.CounterVec
	keyReloads      *prometheus.CounterVec
	apiRefused      prometheus.Counter
	invalidRecords  *prometheus.CounterVec
	restarts        prometheus.Gauge
	stopped         prometheus.Gauge
	trainerCrashes  prometheus.Counter
	straggler       *prometheus.GaugeVec
	drainDuration   prometheus.Histogram
}

// latencyBuckets span 10 ms to ~40 s: detection and recovery times.
var latencyBuckets = prometheus.ExponentialBuckets(0.01, 2, 12)

func newMetrics(gossipMembers, gossipSuspects func() float64) *metrics {
	r := registrar{telemetry.NewRegistry()}
	m := &metrics{
		reg: r.reg,
		generation: r.gauge("ringside_coordinator_generation",
			"Number of the newest committed generation this member holds."),
		worldSize: r.gauge("ringside_coordinator_world_size",
			"World size (ranks) of the newest committed generation."),
		members: r.gaugeVec("ringside_coordinator_members",
			"Members of the newest generation by state (active, standby).", "state"),
		leader: r.gauge("ringside_coordinator_leader",
			"1 while this member leads the job, else 0."),
		failureToCommit: r.histogram("ringside_coordinator_failure_to_generation_seconds",
			"Time from detecting a dead member to holding the generation without it.", latencyBuckets),
		rendezvousWait: r.histogram("ringside_api_rendezvous_wait_seconds",
			"How long rendezvous requests waited for their generation.", latencyBuckets),
		trainerAttached: r.gauge("ringside_api_trainer_attached",
			"1 while this pod's trainer is attached to the API (an event stream open, heartbeats on time), else 0."),
		trainerSamples: r.gauge("ringside_trainer_samples_per_second",
			"Samples per second this pod's trainer processed over its last status interval, from its heartbeats (the rate stored in etcd); 0 while it is not attached."),
		trainerStep: r.gauge("ringside_trainer_step",
			"The job's step counter in this pod's trainer's last heartbeat (its last commit)."),
		trainerStepTime: r.gauge("ringside_trainer_step_seconds",
			"Seconds per step over the commit interval of this pod's trainer's last heartbeat."),
		trainerGen: r.gauge("ringside_trainer_generation",
			"The generation this pod's trainer trained in at its last heartbeat; behind ringside_coordinator_generation while it re-forms."),
		trainerSkipped: r.counter("ringside_trainer_skipped_steps_total",
			"Steps this pod's trainer rolled back instead of committing (non-finite loss or gradients: the skip-step guard)."),
		gossipMembers: r.gaugeFunc("ringside_gossip_members",
			"Members alive in this sidecar's gossip view, itself included.", gossipMembers),
		gossipSuspects: r.gaugeFunc("ringside_gossip_suspects",
			"Members this sidecar's gossip currently suspects.", gossipSuspects),
		etcdErrors: r.counterVec("ringside_etcd_errors_total",
			"Failed etcd operations, by operation.", "op"),
		apiRequests: r.counterVec("ringside_api_requests_total",
			"Trainer API requests, by handler and status code.", "handler", "code"),
		deadPeers: r.counter("ringside_dead_members_total",
			"Deaths of generation members confirmed in etcd (evicted on two votes, or gone)."),
		votes: r.counterVec("ringside_suspect_votes_total",
			"Votes this sidecar cast against unresponsive members, by outcome (voted, evicted, gone).", "outcome"),
		socketsReset: r.counter("ringside_sockets_reset_total",
			"TCP connections to dead members destroyed."),
		stalledChecks: r.counter("ringside_detector_stalled_checks_total",
			"Checks of a peer repeated because this sidecar itself stalled while it waited (the silence was no evidence)."),
		shed: r.counterVec("ringside_detector_shed_total",
			"Checks and votes this sidecar did not start because as many were in flight already, by what (check, vote): a sidecar that finds many peers unresponsive at once is more likely the one in trouble.", "what"),
		keyReloads: r.counterVec("ringside_gossip_key_reloads_total",
			"Changes of the gossip key file, by result (applied, failed: the keys in use stay).", "result"),
		apiRefused: r.counter("ringside_api_refused_total",
			"Trainer API requests refused because the caller is not this pod's trainer (wrong uid, no or a wrong token)."),
		invalidRecords: r.counterVec("ringside_invalid_records_total",
			"Malformed or out-of-bounds values read from etcd or a peer, ignored, by kind (member, generation, vote, status, eviction, crash, straggler, gossip, other).", "kind"),
		restarts: r.gauge("ringside_coordinator_restarts",
			"Restarts of the job after trainer crashes so far (restart mode), counted job-wide as torchrun counts max_restarts, from the newest generation."),
		stopped: r.gauge("ringside_coordinator_job_stopped",
			"1 once trainer crashes stopped the job (restart budget spent, or a crash loop), else 0; the sidecar's log and `ringside status` say why."),
		trainerCrashes: r.counter("ringside_trainer_crashes_total",
			"Crashes of this pod's trainer that `ringside exec` reported (restart mode), counted or not."),
		straggler: r.gaugeVec("ringside_straggler",
			"1 while the job's leader names this member a straggler (its trainer computes slower than the ring's median by the straggler factor), else 0.", "member"),
		drainDuration: r.histogram("ringside_drain_duration_seconds",
			"Time from the start of this member's drain (SIGTERM, a node taint, a notice) to the generation without it, or to the end of the drain grace when none came in time; also stored in etcd for the controller, which sizes the workers' termination grace period from it.", latencyBuckets),
	}
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

// registrar makes a metric and registers it in one step, so that no metric
// is defined and then left out of the registry.
type registrar struct{ reg *prometheus.Registry }

func register[C prometheus.Collector](r registrar, c C) C {
	r.reg.MustRegister(c)
	return c
}

func (r registrar) gauge(name, help string) prometheus.Gauge {
	return register(r, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

func (r registrar) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return register(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

func (r registrar) gaugeFunc(name, help string, f func() float64) prometheus.GaugeFunc {
	return register(r, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

func (r registrar) counter(name, help string) prometheus.Counter {
	return register(r, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

func (r registrar) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return register(r, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

func (r registrar) histogram(name, help string, buckets []float64) prometheus.Histogram {
	return register(r, prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}))
}

// Gatherer exposes the sidecar's metrics, for embedding and tests.
func (a *Agent) Gatherer() prometheus.Gatherer { return a.metrics.reg }
