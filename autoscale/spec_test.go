package autoscale

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

const validSpec = `{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"StatefulSet","name":"w"},"job":{"name":"llama"},"minReplicas":2,"maxReplicas":8,"unit":2}`

func TestDecodeReportsWhatIsWrongWithASpec(t *testing.T) {
	tests := []struct {
		name, spec, status string
		wantErr            string // "" for a valid spec
		wantStatusOK       bool
	}{
		{name: "a valid spec", spec: validSpec, wantStatusOK: true},
		{name: "defaults fill the zero fields of an older CRD", spec: `{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"j"},"maxReplicas":3}`, wantStatusOK: true},
		{name: "min above max", spec: `{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"j"},"minReplicas":5,"maxReplicas":2}`, wantErr: "minReplicas (5) must not exceed maxReplicas (2)"},
		{name: "bounds not multiples of unit", spec: `{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"j"},"minReplicas":2,"maxReplicas":5,"unit":2}`, wantErr: "must be multiples of unit (2)"},
		{name: "a negative unit", spec: `{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"j"},"maxReplicas":5,"unit":-1}`, wantErr: "must be at least 1"},
		{name: "an efficiency past 1", spec: `{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"j"},"maxReplicas":5,"targetEfficiency":1.5}`, wantErr: "targetEfficiency must be in (0, 1]"},
		{name: "an unknown field", spec: `{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"j"},"maxReplicas":5,"maxReplica":9}`, wantErr: `unknown field "maxReplica"`},
		{name: "a field of the wrong type", spec: `{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"j"},"maxReplicas":"five"}`, wantErr: "spec does not decode"},
		{name: "a spec that is no object", spec: `"grow please"`, wantErr: "spec is a string, not an object"},
		{name: "no spec", wantErr: "spec is missing"},
		{name: "a null spec", spec: `null`, wantErr: "spec is missing"},
		{name: "no target", spec: `{"job":{"name":"j"},"maxReplicas":5}`, wantErr: "scaleTargetRef needs a kind and a name"},
		{name: "a bad apiVersion", spec: `{"scaleTargetRef":{"apiVersion":"a/b/c","kind":"StatefulSet","name":"w"},"job":{"name":"j"},"maxReplicas":5}`, wantErr: "scaleTargetRef.apiVersion"},
		{name: "a job name with a slash", spec: `{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"a/b"},"maxReplicas":5}`, wantErr: "job: job \"a/b\" contains '/'"},
		{name: "a behavior out of HPA's bounds", spec: `{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"j"},"maxReplicas":5,"behavior":{"scaleUp":{"stabilizationWindowSeconds":7200,"selectPolicy":"Most","policies":[{"type":"Nodes","value":0,"periodSeconds":0}]}}}`,
			wantErr: "behavior.scaleUp.stabilizationWindowSeconds must be in 0-3600"},
		{name: "a behavior within HPA's bounds", spec: `{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"j"},"maxReplicas":5,"behavior":{"scaleUp":{"stabilizationWindowSeconds":3600,"selectPolicy":"Min","policies":[{"type":"Percent","value":100,"periodSeconds":1800}]},"scaleDown":{"stabilizationWindowSeconds":0,"selectPolicy":"Disabled","policies":[{"type":"Pods","value":1,"periodSeconds":1}]}}}`, wantStatusOK: true},
		{name: "a scale-down tolerance", spec: `{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"j"},"maxReplicas":5,"behavior":{"scaleDown":{"tolerance":"0.05"}}}`,
			wantErr: "behavior.scaleDown.tolerance is set (50m): the ElasticScaler does not use tolerance; its decisions come from marginal efficiency"},
		{name: "a zero scale-up tolerance is still one set", spec: `{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"j"},"maxReplicas":5,"behavior":{"scaleUp":{"tolerance":0}}}`,
			wantErr: "behavior.scaleUp.tolerance is set (0)"},
		{name: "a status that does not decode is dropped, the spec still valid", spec: validSpec, status: `{"currentReplicas":"many"}`, wantStatusOK: false},
		{name: "a status that is no object", spec: validSpec, status: `[1,2]`, wantStatusOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es, statusOK, err := decode(rawScaler("s", tt.spec, tt.status))
			if es == nil {
				t.Fatal("decode returned no object")
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("decode error %v, want %q", err, tt.wantErr)
			}
			if tt.wantErr == "" && statusOK != tt.wantStatusOK {
				t.Fatalf("statusOK %v, want %v", statusOK, tt.wantStatusOK)
			}
			if err == nil && (es.Spec.Unit < 1 || es.Spec.MinReplicas < 1 || es.Spec.TargetEfficiency <= 0 || es.Spec.PendingTimeoutSeconds < 1) {
				t.Fatalf("a valid spec without its defaults: %+v", es.Spec)
			}
		})
	}
}

// TestOddObjectsGetAConditionNotAPanic: whatever slipped past the schema
// is reported in AbleToScale with the problem named, and touches no scale.
func TestOddObjectsGetAConditionNotAPanic(t *testing.T) {
	etcd := startEtcd(t)
	tests := []struct {
		name, spec, status, wantMsg string
	}{
		{"min above max from an old CRD", `{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"j"},"minReplicas":5,"maxReplicas":2}`, "", "minReplicas (5) must not exceed maxReplicas (2)"},
		{"an unknown field", `{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"j"},"maxReplicas":2,"targetUtilization":3}`, "", `unknown field "targetUtilization"`},
		{"a garbage spec and status", `[true]`, `"broken"`, "spec is a []interface {}, not an object"},
		{"garbage conditions", validSpec, `{"conditions":[{"type":7}]}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, etcd, rawScaler("odd", tt.spec, tt.status))
			f.target("w", 2)
			err := f.sync("odd")
			es := f.stored("odd")
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatal(err)
				}
				wantCondition(t, es, v1alpha1.AbleToScale, metav1.ConditionTrue, ReasonReadyForNewScale, "")
				return
			}
			if err != nil {
				t.Fatalf("sync = %v, want nil: a retry cannot fix a spec", err)
			}
			wantCondition(t, es, v1alpha1.AbleToScale, metav1.ConditionFalse, ReasonInvalidSpec, tt.wantMsg)
			if w := f.writes(); w.scale != 0 || w.status != 1 {
				t.Fatalf("writes %+v, want the status only", w)
			}
			before := f.writes()
			if err := f.sync("odd"); err != nil {
				t.Fatal(err)
			}
			if after := f.writes(); after != before {
				t.Fatalf("a second sync of the same invalid spec wrote: %+v -> %+v", before, after)
			}
		})
	}
}

// FuzzDecode: no object, however odd, makes decode panic, and what it
// accepts satisfies the policy's preconditions.
func FuzzDecode(f *testing.F) {
	f.Add(validSpec, `{}`)
	f.Add(`{"scaleTargetRef":{"kind":"StatefulSet","name":"w"},"job":{"name":"j"},"minReplicas":5,"maxReplicas":2}`, `{"throughput":[{"worldSize":"x"}]}`)
	f.Add(`{"behavior":{"scaleDown":{"policies":[{}]}}}`, `null`)
	f.Add(`{"minReplicas":1e40,"maxReplicas":-0}`, `{"conditions":null,"efficiency":"NaN"}`)
	f.Fuzz(func(t *testing.T, spec, status string) {
		u := &unstructured.Unstructured{}
		doc := `{"apiVersion":"ringside.dev/v1alpha1","kind":"ElasticScaler","metadata":{"name":"f","namespace":"n"},"spec":` + spec + `,"status":` + status + `}`
		if u.UnmarshalJSON([]byte(doc)) != nil {
			return
		}
		es, _, err := decode(u)
		if es == nil {
			t.Fatal("decode returned no object")
		}
		if err != nil {
			return
		}
		s := es.Spec
		if s.Unit < 1 || s.MinReplicas < 1 || s.MinReplicas > s.MaxReplicas || s.MinReplicas%s.Unit != 0 || s.MaxReplicas%s.Unit != 0 ||
			!(s.TargetEfficiency > 0 && s.TargetEfficiency <= 1) {
			t.Fatalf("decode accepted a spec out of bounds: %+v", s)
		}
	})
}
