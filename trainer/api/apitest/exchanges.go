// Package apitest reads the trainer API's golden fixtures (trainer/api/
// testdata) for the tests on both sides of the contract: the api types'
// round trip and the sidecar's real answers. The Python client's tests read
// the same files.
package apitest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Exchange is one entry of exchanges.json: the endpoint that answers (or
// is sent) a golden file, and with which status.
type Exchange struct {
	Method  string `json:"method"`
	Path    string `json:"path"`
	Status  int    `json:"status"`
	Request string `json:"request,omitempty"`
	Answer  string `json:"answer,omitempty"`
}

// Exchanges reads dir/exchanges.json strictly (unknown fields fail).
func Exchanges(t testing.TB, dir string) []Exchange {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "exchanges.json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var all []Exchange
	if err := dec.Decode(&all); err != nil {
		t.Fatalf("exchanges.json: %v", err)
	}
	return all
}

// Of returns the exchange that names file as its answer or request.
func Of(t testing.TB, dir, file string) Exchange {
	t.Helper()
	for _, ex := range Exchanges(t, dir) {
		if ex.Answer == file || ex.Request == file {
			return ex
		}
	}
	t.Fatalf("exchanges.json does not name %s: add its endpoint and status", file)
	return Exchange{}
}
