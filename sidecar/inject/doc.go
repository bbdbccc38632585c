// Package inject adds ringside's sidecar to a worker pod, as Istio and
// Linkerd inject their proxies: Inject is a pure function from a pod and
// the job's settings to the injected pod, Patch the JSON patch an
// admission webhook answers with, and Handler that webhook (AdmissionReview
// v1).
//
// A pod opts in with the ringside.dev/job label naming its job (the
// webhook's namespaceSelector opts namespaces in); the
// ringside.dev/inject: "false" annotation opts it out. The sidecar runs as
// a native sidecar (an init container with restartPolicy Always), so it
// starts before the trainer and stops after it; it shares an emptyDir with
// the trainer for the API socket (and, in restart mode, the ringside
// binary that runs the trainer's command under `ringside exec`).
package inject
