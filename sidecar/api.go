package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ringside/ringside/telemetry"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/trainer/api"
)

// Rendezvous long polls wait at most this long.
const (
	defaultPollTimeout = 30 * time.Second
	maxPollTimeout     = 5 * time.Minute
	maxBodyBytes       = 64 << 10
)

// handler returns the trainer API.
func (a *Agent) handler() http.Handler {
	mux := http.NewServeMux()
	route := func(path, method string, h http.HandlerFunc) {
		name := strings.TrimPrefix(path, "/")
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
			defer func() { a.metrics.apiRequests.WithLabelValues(name, strconv.Itoa(rec.code)).Inc() }()
			if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
				rec.Header().Set("Allow", method)
				writeError(rec, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: method not allowed, use %s", r.Method, path, method))
				return
			}
			h(rec, r)
		})
	}
	// The trainer's own endpoints (see api.TokenHeader).
	route("/v1/rendezvous", http.MethodGet, a.trainerOnly(a.serveRendezvous))
	route("/v1/events", http.MethodGet, a.trainerOnly(a.serveEvents))
	route("/v1/heartbeat", http.MethodPost, a.trainerOnly(a.serveHeartbeat))
	route("/v1/failure", http.MethodPost, a.trainerOnly(a.serveFailure))
	route("/v1/leave", http.MethodPost, a.trainerOnly(a.serveLeave))
	route("/v1/restart", http.MethodPost, a.trainerOnly(a.serveRestart))
	route("/v1/finish", http.MethodPost, a.trainerOnly(a.serveFinish))
	a.routeProbes(route, "/v1")
	route("/metrics", http.MethodGet, a.metricsHandler().ServeHTTP)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint %s; this sidecar serves API %s under /%s/", r.URL.Path, api.APIVersion, api.APIVersion))
	})
	return mux
}

// probeHandler serves the health answers and the metrics alone, for
// Config.ProbeAddr: under / (as the kubelet and Prometheus expect them)
// and under /v1 (as on the socket).
func (a *Agent) probeHandler() http.Handler {
	mux := http.NewServeMux()
	route := func(path, method string, h http.HandlerFunc) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
				w.Header().Set("Allow", method)
				writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: method not allowed, use %s", r.Method, path, method))
				return
			}
			h(w, r)
		})
	}
	a.routeProbes(route, "")
	a.routeProbes(route, "/v1")
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint %s; the probe address serves /healthz, /readyz and /metrics only", r.URL.Path))
	})
	return mux
}

// routeProbes adds healthz, readyz and metrics under prefix.
func (a *Agent) routeProbes(route func(path, method string, h http.HandlerFunc), prefix string) {
	route(prefix+"/healthz", http.MethodGet, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, api.StatusBody{Status: api.StatusOK})
	})
	route(prefix+"/readyz", http.MethodGet, a.serveReady)
	route(prefix+"/metrics", http.MethodGet, a.metricsHandler().ServeHTTP)
}

func (a *Agent) metricsHandler() http.Handler {
	return telemetry.MetricsHandler(a.metrics.reg)
}

// serveRendezvous answers GET /v1/rendezvous?after=N&timeout=D with the
// first generation numbered above N, waiting up to D; 204 on timeout.
func (a *Agent) serveRendezvous(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var after int64
	if s := q.Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("after=%q: want a generation number >= 0", s))
			return
		}
		after = n
	}
	timeout := defaultPollTimeout
	if s := q.Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > maxPollTimeout {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout=%q: want a duration between 0s and %s", s, maxPollTimeout))
			return
		}
		timeout = d
	}
	slot, err := a.presence.trainerSlot(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	a.presence.pollStarted(slot)
	answered := false
	defer func() { a.presence.pollEnded(slot, answered) }()
	start := time.Now()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		g, changed := a.generation()
		if g != nil && g.Number > after {
			a.metrics.rendezvousWait.Observe(time.Since(start).Seconds())
			writeJSON(w, http.StatusOK, api.NewRendezvous(g, a.cfg.MemberID, a.nccl))
			answered = true
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			w.WriteHeader(http.StatusNoContent)
			answered = true
			return
		case <-r.Context().Done():
			return
		case <-a.stopCtx.Done():
			writeError(w, http.StatusServiceUnavailable, "sidecar is shutting down")
			return
		}
	}
}

// serveEvents streams events as JSON lines, starting with the current
// generation (and the drain, if one is under way). An open stream is the
// trainer's presence (trainer.go): the trainer closing it is its end. A
// stream opened with ?observe=true (a status tool, a test harness) is
// not the trainer: it neither keeps the member attached nor activates it;
// one opened with ?local_rank=K is the presence of slot K's process, one
// with ?mode=restart that of a trainer in restart mode (`ringside exec`).
func (a *Agent) serveEvents(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	observe := false
	if s := r.URL.Query().Get("observe"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("observe=%q: want true or false", s))
			return
		}
		observe = b
	}
	slot, err := a.presence.trainerSlot(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	mode := r.URL.Query().Get("mode")
	if mode != "" && mode != api.ModeLive && mode != api.ModeRestart {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("mode=%q: want %s or %s", mode, api.ModeLive, api.ModeRestart))
		return
	}
	ch := a.events.subscribe()
	defer a.events.unsubscribe(ch)
	if observe {
		a.streamEvents(w, flusher, r, ch)
		return
	}
	if mode == api.ModeRestart {
		a.presence.restarting()
	}
	a.presence.streamOpened(slot)
	byTrainer := a.streamEvents(w, flusher, r, ch)
	a.presence.streamClosed(slot, byTrainer)
}

// streamEvents writes the stream until it ends; it reports whether the
// trainer's side ended it (hung up, or its socket is gone), not the
// sidecar.
func (a *Agent) streamEvents(w http.ResponseWriter, flusher http.Flusher, r *http.Request, ch <-chan api.Event) (byTrainer bool) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	for _, e := range a.initialEvents() {
		if enc.Encode(e) != nil {
			return true
		}
	}
	flusher.Flush()
	for {
		select {
		case e, open := <-ch:
			if !open {
				return false // dropped as too slow, or the sidecar stops
			}
			if enc.Encode(e) != nil {
				return true
			}
			flusher.Flush()
		case <-r.Context().Done():
			return true
		case <-a.stopCtx.Done():
			return false
		}
	}
}

func (a *Agent) serveHeartbeat(w http.ResponseWriter, r *http.Request) {
	var hb api.Heartbeat
	if !decodeBody(w, r, &hb) {
		return
	}
	if err := hb.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, "heartbeat: "+err.Error())
		return
	}
	a.recordHeartbeat(hb)
	w.WriteHeader(http.StatusNoContent)
}

func (a *Agent) serveFailure(w http.ResponseWriter, r *http.Request) {
	var f api.FailureReport
	if !decodeBody(w, r, &f) {
		return
	}
	if f.Peer == "" {
		writeError(w, http.StatusBadRequest, "failure: peer is empty; name the member whose collective failed")
		return
	}
	if err := record.ValidateID(f.Peer); err != nil {
		writeError(w, http.StatusBadRequest, "failure: peer: "+err.Error())
		return
	}
	if f.Peer == a.cfg.MemberID {
		writeError(w, http.StatusBadRequest, "failure: peer is this member itself")
		return
	}
	a.detect.ReportFailure(f)
	writeJSON(w, http.StatusAccepted, api.StatusBody{Status: api.StatusChecking + f.Peer})
}

func (a *Agent) serveLeave(w http.ResponseWriter, r *http.Request) {
	a.requestDrain("leave requested by the trainer")
	writeJSON(w, http.StatusAccepted, api.StatusBody{Status: api.StatusDraining})
}

// serveRestart records a trainer crash (restart mode) in etcd at once;
// the leader decides whether the job restarts, whether the crash counts
// against its restart budget, or whether it stops (coordinator/crash.go).
func (a *Agent) serveRestart(w http.ResponseWriter, r *http.Request) {
	var rr api.RestartReport
	if !decodeReport(w, r, "restart", &rr) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	gen, now, ok := a.exitGeneration(ctx, w, "restart", rr.Generation)
	if !ok {
		return
	}
	c := rr.Crash(gen, now)
	c.FirstStep = c.FirstStep || a.steppedSince(now.Add(-time.Duration(c.RanS*float64(time.Second))))
	if err := a.member.ReportCrash(ctx, c); err != nil {
		writeError(w, http.StatusServiceUnavailable, "restart not recorded: "+err.Error())
		return
	}
	a.metrics.trainerCrashes.Inc()
	a.log.Warn("trainer crashed; reported to the job's leader", "generation", c.Generation, "exit", c.Exits(false),
		"first_step", c.FirstStep, "ran_s", c.RanS, "cause", c.Cause())
	writeJSON(w, http.StatusAccepted, api.StatusBody{Status: api.StatusRestarting})
}

// serveFinish records that the trainer's command exited 0 (restart
// mode): the job is finishing, and no generation follows while its
// members' commands end (coordinator/crash.go).
func (a *Agent) serveFinish(w http.ResponseWriter, r *http.Request) {
	var fr api.FinishReport
	if !decodeReport(w, r, "finish", &fr) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	gen, now, ok := a.exitGeneration(ctx, w, "finish", fr.Generation)
	if !ok {
		return
	}
	if err := a.member.ReportFinished(ctx, fr.Finish(gen, now)); err != nil {
		writeError(w, http.StatusServiceUnavailable, "finish not recorded: "+err.Error())
		return
	}
	a.finished.Store(true)
	a.log.Info("trainer finished; the job is finishing, and no generation follows", "generation", gen, "ran_s", fr.RanS)
	writeJSON(w, http.StatusAccepted, api.StatusBody{Status: api.StatusFinished})
}

// exitGeneration is the generation a trainer's exit report (what: restart
// or finish) is about: reported (nonzero) or the current one, once the
// sidecar has joined. It answers the request itself when there is none.
func (a *Agent) exitGeneration(ctx context.Context, w http.ResponseWriter, what string, reported int64) (gen int64, now time.Time, ok bool) {
	select {
	case <-a.started: // the API serves before the join completes
	case <-ctx.Done():
		writeError(w, http.StatusServiceUnavailable, what+" not recorded: the sidecar has not joined the job yet")
		return 0, time.Time{}, false
	}
	g, _ := a.generation()
	if g == nil && reported == 0 {
		writeError(w, http.StatusServiceUnavailable, what+" not recorded: the job has no generation yet")
		return 0, time.Time{}, false
	}
	if g != nil {
		gen = g.Number
	}
	return gen, time.Now(), true
}

func (a *Agent) serveReady(w http.ResponseWriter, _ *http.Request) {
	if g, _ := a.generation(); g == nil {
		writeError(w, http.StatusServiceUnavailable, "no generation yet")
		return
	}
	writeJSON(w, http.StatusOK, api.StatusBody{Status: api.StatusReady})
}

// decodeReport reads a report's optional JSON body into v and checks it
// (what names the report in an error); it answers the request itself when
// either fails.
func decodeReport(w http.ResponseWriter, r *http.Request, what string, v interface{ Validate() error }) bool {
	if r.ContentLength != 0 && !decodeBody(w, r, v) {
		return false
	}
	if err := v.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, what+": "+err.Error())
		return false
	}
	return true
}

// decodeBody reads a JSON body strictly: one object, known fields only. The
// content type is not checked, so `curl -d` works.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "bad JSON body: "+err.Error())
		return false
	}
	if dec.Decode(&struct{}{}) != io.EOF {
		writeError(w, http.StatusBadRequest, "bad JSON body: more than one value")
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // the client went away
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, api.ErrorBody{Error: msg})
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
