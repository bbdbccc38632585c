package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

func admit(t *testing.T, h *Handler, body []byte) (*admissionv1.AdmissionResponse, int) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/inject", bytes.NewReader(body)))
	if w.Code != http.StatusOK {
		return nil, w.Code
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	return out.Response, w.Code
}

func TestTheWebhookAnswers(t *testing.T) {
	opted := []byte(`{"metadata":{"name":"p","labels":{"ringside.dev/job":"j"}},"spec":{"containers":[{"name":"t","image":"x","command":["x"]}]}}`)
	conflicting := []byte(`{"metadata":{"name":"p","labels":{"ringside.dev/job":"j"}},"spec":{"containers":[{"name":"ringside","image":"x"}]}}`)
	plain := []byte(`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"t","image":"x"}]}}`)
	var results []string
	h := &Handler{Config: DefaultConfig("ringside:test"), SkipNamespaces: []string{"ringside-system"}, Observe: func(r string) { results = append(results, r) }}
	lenient := &Handler{Config: DefaultConfig("ringside:test"), AllowOnError: true}

	if r, _ := admit(t, h, review("CREATE", opted)); !r.Allowed || r.Patch == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Errorf("an opted-in pod: %+v, want allowed with a JSON patch", r)
	}
	if r, _ := admit(t, h, review("CREATE", plain)); !r.Allowed || r.Patch != nil {
		t.Errorf("a plain pod: %+v, want allowed untouched", r)
	}
	if r, _ := admit(t, h, review("UPDATE", opted)); !r.Allowed || r.Patch != nil {
		t.Errorf("an update: %+v, want allowed untouched", r)
	}
	own := bytes.Replace(review("CREATE", opted), []byte(`"team-a"`), []byte(`"ringside-system"`), 1)
	if r, _ := admit(t, h, own); !r.Allowed || r.Patch != nil {
		t.Errorf("a pod of ringside's namespace: %+v, want allowed untouched", r)
	}
	r, _ := admit(t, h, review("CREATE", conflicting))
	if r.Allowed || r.Result == nil || !strings.Contains(r.Result.Message, `container named "ringside"`) {
		t.Errorf("a conflicting pod: %+v, want denied naming the conflict", r)
	}
	badJob := bytes.Replace(opted, []byte(`"ringside.dev/job":"j"`), []byte(`"ringside.dev/job":"team/j"`), 1)
	r, _ = admit(t, h, review("CREATE", badJob))
	if r.Allowed || r.Result == nil || !strings.Contains(r.Result.Message, `label ringside.dev/job is "team/j"`) {
		t.Errorf("a job label ringside refuses: %+v, want denied naming the label and its value", r)
	}
	r, _ = admit(t, lenient, review("CREATE", conflicting))
	if !r.Allowed || r.Patch != nil || len(r.Warnings) != 1 {
		t.Errorf("a conflicting pod, allowed on error: %+v, want allowed untouched with a warning", r)
	}
	if _, code := admit(t, h, []byte(`{"kind":`)); code != http.StatusBadRequest {
		t.Errorf("a malformed review answered %d, want 400", code)
	}
	if r, _ := admit(t, h, review("CREATE", []byte(`{"spec":{"containers":"no"}}`))); r.Allowed || !strings.Contains(r.Result.Message, "does not decode") {
		t.Errorf("a pod that does not decode: %+v, want denied", r)
	}
	want := []string{"injected", "skipped", "skipped", "skipped", "denied", "denied", "invalid", "invalid"}
	if strings.Join(results, ",") != strings.Join(want, ",") {
		t.Errorf("observed %v, want %v", results, want)
	}
}
