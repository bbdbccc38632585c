package autoscale

import (
	"context"
	"encoding/json"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// ScaleClient reads and updates the scale subresource of a target.
type ScaleClient interface {
	GetScale(ctx context.Context, resource schema.GroupVersionResource, namespace, name string) (*autoscalingv1.Scale, error)
	UpdateScale(ctx context.Context, resource schema.GroupVersionResource, namespace string, s *autoscalingv1.Scale) (*autoscalingv1.Scale, error)
}

var _ ScaleClient = dynamicScales{}

// dynamicScales reads and writes the scale subresource through the
// dynamic client: every scale subresource (of a StatefulSet, a
// Deployment or a custom resource) serves autoscaling/v1 Scale, so the
// controller needs neither client-go's scale client nor its scheme of
// every group's Scale.
type dynamicScales struct {
	dyn dynamic.Interface
}

func (d dynamicScales) GetScale(ctx context.Context, r schema.GroupVersionResource, namespace, name string) (*autoscalingv1.Scale, error) {
	if r == jobsResource {
		return d.jobScale(ctx, namespace, name)
	}
	u, err := d.dyn.Resource(r).Namespace(namespace).Get(ctx, name, metav1.GetOptions{}, "scale")
	if err != nil {
		return nil, err
	}
	return scaleFrom(u)
}

func (d dynamicScales) UpdateScale(ctx context.Context, r schema.GroupVersionResource, namespace string, s *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
	if r == jobsResource {
		return d.setJobParallelism(ctx, namespace, s)
	}
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

var jobsResource = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}

// jobScale is the scale of a batch/v1 Job, which has no scale
// subresource: its size is spec.parallelism (what Kueue's elastic Jobs
// resize), its replicas the pods active, its selector its pods'.
func (d dynamicScales) jobScale(ctx context.Context, namespace, name string) (*autoscalingv1.Scale, error) {
	u, err := d.dyn.Resource(jobsResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	// Read unstructured: batch/v1's Go types would link another API group
	// into the binary for three fields.
	sc := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, ResourceVersion: u.GetResourceVersion()}}
	sc.Spec.Replicas = 1 // the API server's default parallelism
	if p, found, err := unstructured.NestedInt64(u.Object, "spec", "parallelism"); err == nil && found {
		sc.Spec.Replicas = int32(p)
	}
	active, _, _ := unstructured.NestedInt64(u.Object, "status", "active")
	sc.Status.Replicas = int32(active)
	sel, err := specSelector(u)
	if err != nil {
		return nil, fmt.Errorf("Job %s/%s: %w", namespace, name, err)
	}
	if sel != nil {
		sc.Status.Selector = sel.String()
	}
	return sc, nil
}

// setJobParallelism sets a Job's spec.parallelism to s's replicas, as
// of the Job's version that s was read from.
func (d dynamicScales) setJobParallelism(ctx context.Context, namespace string, s *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": s.ResourceVersion},
		"spec":     map[string]any{"parallelism": s.Spec.Replicas},
	})
	if err != nil {
		return nil, err
	}
	if _, err := d.dyn.Resource(jobsResource).Namespace(namespace).Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return nil, err
	}
	return d.jobScale(ctx, namespace, s.Name)
}

// specSelector is the pod selector in u's spec.selector (a metav1
// LabelSelector, as a Job's, a StatefulSet's or a Deployment's), nil when
// it has none.
func specSelector(u *unstructured.Unstructured) (labels.Selector, error) {
	m, found, err := unstructured.NestedMap(u.Object, "spec", "selector")
	if err != nil || !found {
		return nil, err
	}
	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &ls); err != nil {
		return nil, fmt.Errorf("spec.selector: %w", err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil {
		return nil, fmt.Errorf("spec.selector: %w", err)
	}
	return sel, nil
}
