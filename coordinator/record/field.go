package record

import "fmt"

// FieldError is one config field that a Validate rejects (a coordinator,
// sidecar, etcd connection or netopt config). Field is the field's Go name,
// so that a command line can name the flag that set it instead ("--ttl
// must be ..."); the error itself names the field in words.
type FieldError struct {
	// Field is the config field: "TTL", "MemberID", "Endpoints"...
	Field string
	// Name is the field in words, for the error text: "member lease TTL".
	Name string
	// Problem completes Name into a sentence: "must be ..., got 16".
	Problem string
}

func (e *FieldError) Error() string { return e.Name + " " + e.Problem }

// BadField returns a *FieldError whose Problem is format with args.
func BadField(field, name, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Name: name, Problem: fmt.Sprintf(format, args...)}
}
