package api

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
	StatusDraining   = "draining"   // POST /v1/leave
	StatusRestarting = "restarting" // POST /v1/restart
	// StatusChecking prefixes the peer's id in the answer to POST
	// /v1/failure.
	StatusChecking = "checking "
)
