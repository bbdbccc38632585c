package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/yaml"
)

// FuzzAdmissionReview: whatever the body, the webhook answers 400 or an
// AdmissionReview whose response carries the request's UID, and a patch
// only when it allows; it never panics.
func FuzzAdmissionReview(f *testing.F) {
	for _, name := range []string{"live.pod.yaml", "restart.pod.yaml", "gpus.pod.yaml", "launcher.pod.yaml"} {
		raw, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		pod, err := yaml.YAMLToJSON(raw)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(review("CREATE", pod))
	}
	f.Add(review("CREATE", []byte(`{"metadata":{"labels":{"ringside.dev/job":""}},"spec":{"containers":[]}}`)))
	for _, job := range []string{"team/llama", "llama 7b", "-llama", strings.Repeat("j", 64), "llama\n"} {
		pod, _ := json.Marshal(map[string]any{
			"metadata": map[string]any{"labels": map[string]string{JobLabel: job}},
			"spec":     map[string]any{"containers": []map[string]any{{"name": "t", "image": "x", "command": []string{"x"}}}},
		})
		f.Add(review("CREATE", pod))
	}
	f.Add(review("UPDATE", []byte(`{}`)))
	f.Add([]byte(`{"request":null}`))
	f.Add([]byte(`not json`))
	h := &Handler{Config: DefaultConfig("ringside:test")}
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/inject", bytes.NewReader(body)))
		if w.Code == http.StatusBadRequest {
			return
		}
		if w.Code != http.StatusOK {
			t.Fatalf("answered %d: %s", w.Code, w.Body)
		}
		var in, out admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatalf("answered 200 to a body that does not decode: %v", err)
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("the answer is not an AdmissionReview with a response: %v\n%s", err, w.Body)
		}
		if out.Response.UID != in.Request.UID {
			t.Fatalf("answered UID %q for request %q", out.Response.UID, in.Request.UID)
		}
		if out.Response.Patch != nil && !out.Response.Allowed {
			t.Fatal("a patch on a denied request")
		}
		if !out.Response.Allowed && (out.Response.Result == nil || out.Response.Result.Message == "") {
			t.Fatal("denied without a message")
		}
	})
}

func review(op string, pod []byte) []byte {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid": "7c5e", "kind": map[string]string{"group": "", "version": "v1", "kind": "Pod"},
			"resource":  map[string]string{"group": "", "version": "v1", "resource": "pods"},
			"namespace": "team-a", "operation": op, "object": json.RawMessage(pod),
		},
	})
	return b
}
