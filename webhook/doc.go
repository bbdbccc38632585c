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
//
// The ringside.dev/mode annotation says how the trainer follows the
// job's generations, and so how the sidecar joins:
//
//   - live (the default): the trainer re-forms its process group itself
//     through the Python client; the sidecar awaits its first call before
//     it enters the ring, so a slowly starting trainer stalls no one.
//   - restart: the trainer's command runs under `ringside exec`,
//     restarted on every generation.
//   - launcher: a launcher started from the membership (horovodrun with
//     `ringside discover-hosts`) starts the training processes, and the
//     trainers never call the sidecar; it enters the ring at once, and the
//     trainer's command is left as it is.
//
// ringside.dev/slots and ringside.dev/container set the ranks in the pod
// and the trainer container; see the constants for each.
package webhook
