package autoscale

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// discoveryServer serves the discovery documents of apps/v1, v1 and (once
// installed) example.com/v1, and counts the requests of each path.
type discoveryServer struct {
	mu        sync.Mutex
	installed bool
	requests  map[string]int
}

func (d *discoveryServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.requests[r.URL.Path]++
	var doc any
	switch r.URL.Path {
	case "/apis/apps/v1":
		doc = metav1.APIResourceList{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
			{Name: "statefulsets", Kind: "StatefulSet", Namespaced: true},
			{Name: "statefulsets/scale", Kind: "Scale", Group: "autoscaling", Version: "v1", Namespaced: true},
		}}
	case "/apis/apps":
		doc = metav1.APIGroup{Name: "apps", PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "apps/v1", Version: "v1"}}
	case "/api/v1":
		doc = metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "configmaps", Kind: "ConfigMap", Namespaced: true}}}
	case "/apis/example.com/v1":
		if d.installed {
			doc = metav1.APIResourceList{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: true}}}
		}
	}
	if doc == nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(doc)
}

func TestDiscoveryMapsAKindToItsResourceAndFindsALateCRD(t *testing.T) {
	d := &discoveryServer{requests: map[string]int{}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	core, err := restClient(&rest.Config{Host: srv.URL}, corev1.SchemeGroupVersion, "/api")
	if err != nil {
		t.Fatal(err)
	}
	m := newDiscoveryMapper(core)
	ctx := context.Background()

	for _, tc := range []struct {
		gk       schema.GroupKind
		versions []string
		want     schema.GroupVersionResource
	}{
		{schema.GroupKind{Group: "apps", Kind: "StatefulSet"}, []string{"v1"}, schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}},
		{schema.GroupKind{Group: "apps", Kind: "StatefulSet"}, nil, schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}},
		{schema.GroupKind{Kind: "ConfigMap"}, []string{"v1"}, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}},
	} {
		got, err := m.Resources(ctx, tc.gk, tc.versions...)
		if err != nil || len(got) != 1 || got[0] != tc.want {
			t.Errorf("Resources(%v, %v) = %v, %v; want [%v]", tc.gk, tc.versions, got, err, tc.want)
		}
	}
	if n := d.requests["/apis/apps/v1"]; n != 1 {
		t.Errorf("apps/v1 discovered %d times, want once (then cached)", n)
	}

	widget := schema.GroupKind{Group: "example.com", Kind: "Widget"}
	var noMatch *meta.NoKindMatchError
	if _, err := m.Resources(ctx, widget, "v1"); !errors.As(err, &noMatch) {
		t.Fatalf("a kind nobody serves: %v, want a NoKindMatchError", err)
	}
	d.mu.Lock()
	d.installed = true
	d.mu.Unlock()
	got, err := m.Resources(ctx, widget, "v1")
	if err != nil || len(got) != 1 || got[0].Resource != "widgets" {
		t.Fatalf("a CRD installed after the first look: %v, %v; want widgets", got, err)
	}
}
