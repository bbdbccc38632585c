// Package api is the sidecar's trainer API on the wire: the JSON bodies of
// every endpoint, shared by the sidecar that serves them and the clients
// that call it (trainer/client, Go trainers, restart mode). It imports only
// the standard library and coordinator/record, so a trainer that speaks
// the API pulls in neither etcd, gossip nor Kubernetes.
//
// Endpoints, under /v1/ (APIVersion) on a unix socket or loopback TCP:
//
//	GET  /v1/rendezvous?after=N&timeout=D  200 Rendezvous, 204 when D ran out
//	GET  /v1/events                        200 JSON lines of Event
//	POST /v1/heartbeat                     Heartbeat -> 204
//	POST /v1/failure                       FailureReport -> 202 StatusBody
//	POST /v1/leave                         202 StatusBody
//	POST /v1/restart                       RestartReport (optional) -> 202 StatusBody
//	POST /v1/finish                        FinishReport (optional) -> 202 StatusBody
//	GET  /v1/healthz, /v1/readyz           200 StatusBody
//
// Every endpoint but the health answers and the metrics serves only the
// pod's own trainer: see TokenHeader.
//
// Every error answer is an ErrorBody. testdata/ holds a golden answer of
// each endpoint; the sidecar's tests produce them and the Python client's
// tests serve and parse the same files, so neither side drifts.
package api
