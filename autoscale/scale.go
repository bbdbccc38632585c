package autoscale

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// ScaleClient reads and updates the scale subresource of a target.
type ScaleClient interface {
	GetScale(ctx context.Context, resource schema.GroupVersionResource, namespace, name string) (*autoscalingv1.Scale, error)
	UpdateScale(ctx context.Context, resource schema.GroupVersionResource, namespace string, s *autoscalingv1.Scale) (*autoscalingv1.Scale, error)
}

// KindMapper names the resources of a kind, in the first of the versions
// given that serves it (none given: the group's preferred version). It
// returns a *meta.NoKindMatchError when no version serves the kind.
type KindMapper interface {
	Resources(ctx context.Context, gk schema.GroupKind, versions ...string) ([]schema.GroupVersionResource, error)
}

var (
	_ ScaleClient = dynamicScales{}
	_ KindMapper  = (*discoveryMapper)(nil)
)

// dynamicScales reads and writes the scale subresource through the
// dynamic client: every scale subresource (of a StatefulSet, a
// Deployment or a custom resource) serves autoscaling/v1 Scale, so the
// controller needs neither client-go's scale client nor its scheme of
// every group's Scale.
type dynamicScales struct {
	dyn dynamic.Interface
}

func (d dynamicScales) GetScale(ctx context.Context, r schema.GroupVersionResource, namespace, name string) (*autoscalingv1.Scale, error) {
	u, err := d.dyn.Resource(r).Namespace(namespace).Get(ctx, name, metav1.GetOptions{}, "scale")
	if err != nil {
		return nil, err
	}
	return scaleFrom(u)
}

func (d dynamicScales) UpdateScale(ctx context.Context, r schema.GroupVersionResource, namespace string, s *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
	if err != nil {
		return nil, fmt.Errorf("encode the scale: %w", err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(autoscalingv1.SchemeGroupVersion.WithKind("Scale"))
	out, err := d.dyn.Resource(r).Namespace(namespace).Update(ctx, u, metav1.UpdateOptions{}, "scale")
	if err != nil {
		return nil, err
	}
	return scaleFrom(out)
}

func scaleFrom(u *unstructured.Unstructured) (*autoscalingv1.Scale, error) {
	if gvk := u.GroupVersionKind(); gvk != autoscalingv1.SchemeGroupVersion.WithKind("Scale") {
		return nil, fmt.Errorf("the scale subresource answered a %s, not an autoscaling/v1 Scale", gvk)
	}
	s := &autoscalingv1.Scale{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, s); err != nil {
		return nil, fmt.Errorf("decode the scale: %w", err)
	}
	return s, nil
}

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
