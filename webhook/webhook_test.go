package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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

// graces is a MeasuredGrace of fixed figures, by "namespace/job".
type graces map[string]time.Duration

func (g graces) DrainGrace(namespace, job string) (time.Duration, bool) {
	d, ok := g[namespace+"/"+job]
	return d, ok
}

// A job whose drains were measured longer than the configured grace gets
// the measured one (and its termination grace period with it); a shorter
// measurement, another job, or a pod that asks for more changes nothing.
func TestAMeasuredDrainGraceLengthensTheConfiguredOne(t *testing.T) {
	h := &Handler{Config: DefaultConfig("ringside:test"), Measured: graces{"team-a/j": 70 * time.Second, "team-a/quick": time.Second}}
	for _, tc := range []struct {
		name      string
		job       string
		podGrace  string // the pod's own terminationGracePeriodSeconds, "" for none
		wantDrain string
		wantTGPS  float64
	}{
		{"measured longer", "j", "", "--grace=1m10s", 85},
		{"measured shorter than configured", "quick", "", "--grace=25s", 40},
		{"nothing measured", "other", "", "--grace=25s", 40},
		{"the pod asks for more", "j", `,"terminationGracePeriodSeconds":300`, "--grace=1m10s", 300},
	} {
		pod := []byte(`{"metadata":{"name":"p","labels":{"ringside.dev/job":"` + tc.job + `"}},"spec":{"containers":[{"name":"t","image":"x","command":["x"]}]` + tc.podGrace + `}}`)
		r, _ := admit(t, h, review("CREATE", pod))
		if r == nil || !r.Allowed || r.Patch == nil {
			t.Fatalf("%s: %+v, want injected", tc.name, r)
		}
		var ops []struct {
			Path  string `json:"path"`
			Value any    `json:"value"`
		}
		if err := json.Unmarshal(r.Patch, &ops); err != nil {
			t.Fatal(err)
		}
		var tgps float64
		for _, op := range ops {
			if op.Path == "/spec/terminationGracePeriodSeconds" {
				tgps, _ = op.Value.(float64)
			}
		}
		if tc.podGrace != "" && tgps == 0 {
			tgps = 300 // left as the pod had it: no operation
		}
		if tgps != tc.wantTGPS || !strings.Contains(string(r.Patch), tc.wantDrain) {
			t.Errorf("%s: termination grace %v, patch %s; want %v and the sidecar's %s", tc.name, tgps, r.Patch, tc.wantTGPS, tc.wantDrain)
		}
	}
}
