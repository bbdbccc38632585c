package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxReviewBytes bounds an AdmissionReview body; the API server sends at
// most a few MiB (its request size limit is 3 MiB for a pod).
const maxReviewBytes = 8 << 20

// Handler is the mutating admission webhook: it answers an AdmissionReview
// v1 for a pod CREATE with the patch that injects the pod, and allows
// everything else unchanged.
type Handler struct {
	Config Config
	// OnError is what a pod that cannot be injected (conflicting
	// settings) gets: denied (the default, so no worker runs without its
	// sidecar) or, with AllowOnError, admitted untouched.
	AllowOnError bool
	// SkipNamespaces are namespaces never injected (ringside's own).
	SkipNamespaces []string
	Log            *slog.Logger
	// Observe, when set, is told of each answer: "injected", "skipped",
	// "denied" or "invalid".
	Observe func(result string)
	// Measured, when set, gives the drain grace measured for a job: a
	// pod of a job whose drains took longer than Config.Grace allows gets
	// the measured grace instead (ConfigFor).
	Measured MeasuredGrace
}

// MeasuredGrace looks up the drain grace measured for the workers of job
// in namespace (an ElasticScaler's status.drain.gracePeriodSeconds); ok
// is false when nothing was measured.
type MeasuredGrace interface {
	DrainGrace(namespace, job string) (grace time.Duration, ok bool)
}

// ConfigFor is the injection settings for pod in namespace: Config, with
// the drain grace raised to the one measured for the pod's job when that
// is longer. The pod's termination grace period follows (Inject): the
// grace plus a margin, never below what the pod asks for.
func (h *Handler) ConfigFor(namespace string, pod *corev1.Pod) Config {
	cfg := h.Config
	job, ok := pod.Labels[JobLabel]
	if h.Measured == nil || !ok {
		return cfg
	}
	if g, ok := h.Measured.DrainGrace(namespace, job); ok && g > cfg.Grace {
		cfg.Grace = g
	}
	return cfg
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReviewBytes))
	if err != nil {
		h.invalid(w, fmt.Sprintf("read the AdmissionReview: %v", err))
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		h.invalid(w, fmt.Sprintf("malformed AdmissionReview: %v", err))
		return
	}
	if review.Request == nil {
		h.invalid(w, "AdmissionReview without a request")
		return
	}
	resp, result := h.Review(review.Request)
	h.observe(result)
	review.Response = resp
	review.Request = nil
	if review.APIVersion == "" {
		review.APIVersion, review.Kind = "admission.k8s.io/v1", "AdmissionReview"
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(review); err != nil {
		h.log().Warn("writing the admission answer", "err", err)
	}
}

// Review answers one admission request, and names the result.
func (h *Handler) Review(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, string) {
	allow := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Operation != admissionv1.Create || req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.SubResource != "" {
		return allow, "skipped"
	}
	for _, ns := range h.SkipNamespaces {
		if req.Namespace == ns {
			return allow, "skipped"
		}
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return h.refuse(req, fmt.Errorf("the pod in the admission request does not decode: %w", err)), "invalid"
	}
	ns := req.Namespace
	if ns == "" {
		ns = pod.Namespace
	}
	patch, skipped, err := Patch(&pod, ns, h.ConfigFor(ns, &pod))
	switch {
	case err != nil:
		return h.refuse(req, err), "denied"
	case patch == nil:
		h.log().Debug("pod left alone", "namespace", ns, "pod", podName(&pod), "why", string(skipped))
		return allow, "skipped"
	}
	pt := admissionv1.PatchTypeJSONPatch
	allow.Patch, allow.PatchType = patch, &pt
	h.log().Info("injected the ringside sidecar", "namespace", ns, "pod", podName(&pod), "job", pod.Labels[JobLabel])
	return allow, "injected"
}

func (h *Handler) refuse(req *admissionv1.AdmissionRequest, err error) *admissionv1.AdmissionResponse {
	msg := "ringside sidecar injection: " + err.Error()
	h.log().Warn("refused a pod", "namespace", req.Namespace, "name", req.Name, "err", err, "allowed_untouched", h.AllowOnError)
	if h.AllowOnError {
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true, Warnings: []string{msg}}
	}
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest, Message: msg,
	}}
}

func (h *Handler) invalid(w http.ResponseWriter, msg string) {
	h.observe("invalid")
	h.log().Warn("bad admission request", "err", msg)
	http.Error(w, msg, http.StatusBadRequest)
}

func (h *Handler) observe(result string) {
	if h.Observe != nil {
		h.Observe(result)
	}
}

func (h *Handler) log() *slog.Logger {
	if h.Log != nil {
		return h.Log
	}
	return slog.New(slog.DiscardHandler)
}

func podName(p *corev1.Pod) string {
	if p.Name != "" {
		return p.Name
	}
	return p.GenerateName + "*"
}
