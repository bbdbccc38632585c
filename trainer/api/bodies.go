package api

import "github.com/ringside/ringside/coordinator/record"

// ErrorBody is every error answer's body: what was wrong, for people.
type ErrorBody struct {
	Error string `json:"error"`
}

// StatusBody is the body of the health answers and of accepted reports.
type StatusBody struct {
	Status string `json:"status"`
}

// StatusBody.Status of each answer that has one.
const (
	StatusOK         = "ok"         // GET /v1/healthz
	StatusReady      = "ready"      // GET /v1/readyz
	StatusRestarting = "restarting" // POST /v1/restart
	StatusFinished   = "finished"   // POST /v1/finish
	// StatusDraining answers POST /v1/leave: the member's state from now on.
	StatusDraining = string(record.StateDraining)
	// StatusChecking prefixes the peer's id in the answer to POST
	// /v1/failure.
	StatusChecking = "checking "
)
