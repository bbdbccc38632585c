package autoscale

import (
	"context"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
