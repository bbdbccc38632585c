package autoscale

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// KindMapper names the resources of a kind, in the first of the versions
// given that serves it (none given: the group's preferred version). It
// returns a *meta.NoKindMatchError when no version serves the kind.
type KindMapper interface {
	Resources(ctx context.Context, gk schema.GroupKind, versions ...string) ([]schema.GroupVersionResource, error)
}

var _ KindMapper = (*discoveryMapper)(nil)

// discoveryMapper maps a kind to its resources with the API server's
// discovery documents of one group version (GET /apis/<group>/<version>,
// or /api/v1), each read once and read again when a kind is not in it:
// a CRD installed after the start is found at its scaler's next sync.
// It reads only the group versions that scalers name, where client-go's
// deferred discovery mapper reads every group's.
type discoveryMapper struct {
	rest rest.Interface

	mu        sync.Mutex
	resources map[schema.GroupVersion][]metav1.APIResource
	preferred map[string]string // group -> its preferred version
}

func newDiscoveryMapper(r rest.Interface) *discoveryMapper {
	return &discoveryMapper{rest: r, resources: map[schema.GroupVersion][]metav1.APIResource{}, preferred: map[string]string{}}
}

// Resources returns the resources of kind gk in the first of versions
// that serves it (the group's preferred version when none is given).
func (m *discoveryMapper) Resources(ctx context.Context, gk schema.GroupKind, versions ...string) ([]schema.GroupVersionResource, error) {
	if len(versions) == 0 {
		v, err := m.preferredVersion(ctx, gk.Group)
		if err != nil {
			return nil, err
		}
		versions = []string{v}
	}
	for _, v := range versions {
		gv := schema.GroupVersion{Group: gk.Group, Version: v}
		found, err := m.find(ctx, gv, gk.Kind, false)
		if err == nil && len(found) == 0 {
			found, err = m.find(ctx, gv, gk.Kind, true)
		}
		if err != nil {
			return nil, err
		}
		if len(found) > 0 {
			return found, nil
		}
	}
	return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
}

// find returns the resources of kind in gv, from the cache unless refresh
// (or nothing is cached for gv).
func (m *discoveryMapper) find(ctx context.Context, gv schema.GroupVersion, kind string, refresh bool) ([]schema.GroupVersionResource, error) {
	m.mu.Lock()
	list, ok := m.resources[gv]
	m.mu.Unlock()
	if !ok || refresh {
		var err error
		if list, err = m.discover(ctx, gv); err != nil {
			return nil, err
		}
	}
	var out []schema.GroupVersionResource
	for _, r := range list {
		if r.Kind == kind && !strings.Contains(r.Name, "/") { // not a subresource
			out = append(out, gv.WithResource(r.Name))
		}
	}
	return out, nil
}

// discover reads and caches the resources of gv; a group version the
// server does not serve has none.
func (m *discoveryMapper) discover(ctx context.Context, gv schema.GroupVersion) ([]metav1.APIResource, error) {
	var list metav1.APIResourceList
	found, err := m.get(ctx, discoveryPath(gv), &list)
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", gv, err)
	}
	if !found {
		list.APIResources = nil
	}
	m.mu.Lock()
	m.resources[gv] = list.APIResources
	m.mu.Unlock()
	return list.APIResources, nil
}

// preferredVersion is the version the API server prefers for group.
func (m *discoveryMapper) preferredVersion(ctx context.Context, group string) (string, error) {
	if group == "" {
		return "v1", nil
	}
	m.mu.Lock()
	v, ok := m.preferred[group]
	m.mu.Unlock()
	if ok {
		return v, nil
	}
	var g metav1.APIGroup
	found, err := m.get(ctx, "/apis/"+group, &g)
	if err != nil {
		return "", fmt.Errorf("discover group %s: %w", group, err)
	}
	if !found || g.PreferredVersion.Version == "" {
		return "", &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: group}}
	}
	m.mu.Lock()
	m.preferred[group] = g.PreferredVersion.Version
	m.mu.Unlock()
	return g.PreferredVersion.Version, nil
}

// get decodes the JSON document at path into out; found is false when
// the server has none there.
func (m *discoveryMapper) get(ctx context.Context, path string, out any) (found bool, err error) {
	raw, err := m.rest.Get().AbsPath(path).SetHeader("Accept", "application/json").Do(ctx).Raw()
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return false, fmt.Errorf("decode %s: %w", path, err)
	}
	return true, nil
}

func discoveryPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "/api/" + gv.Version
	}
	return "/apis/" + gv.Group + "/" + gv.Version
}
