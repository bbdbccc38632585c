package autoscale

import (
	"context"
	"fmt"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

var pdbResource = schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}

// disruptionBudget keeps the PodDisruptionBudget that spec.podDisruptionBudget
// asks for: minAvailable minReplicas over the target's pods (selector, as
// its scale reports it), owned by the ElasticScaler so that the garbage
// collector deletes it with the scaler (no finalizer: nothing else needs
// cleaning up). It writes only when the budget is missing or differs, and
// waits while the target's scale reports no selector.
func (s *scalerSync) disruptionBudget(ctx context.Context, selector string) error {
	es := s.es
	if !es.Spec.PodDisruptionBudget {
		return nil
	}
	if selector == "" {
		// Not yet: a custom resource's operator fills its scale's
		// selector in once it runs pods (a PyTorchJob's does).
		s.c.log.Debug("no PodDisruptionBudget yet: the target's scale reports no pod selector", "scaler", s.key)
		return nil
	}
	sel, err := metav1.ParseToLabelSelector(selector)
	if err != nil {
		return fmt.Errorf("the target's pod selector %q: %w", selector, err)
	}
	spec := policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(es.Spec.MinReplicas)), Selector: sel}
	client := s.c.deps.Dynamic.Resource(pdbResource).Namespace(es.Namespace)
	u, err := client.Get(ctx, es.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		pdb := &policyv1.PodDisruptionBudget{
			TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
			ObjectMeta: metav1.ObjectMeta{Name: es.Name, Namespace: es.Namespace, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "ElasticScaler", Name: es.Name, UID: es.UID, Controller: ptr.To(true),
			}}},
			Spec: spec,
		}
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pdb)
		if err != nil {
			return err
		}
		if _, err := client.Create(ctx, &unstructured.Unstructured{Object: content}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create PodDisruptionBudget %s: %w", es.Name, err)
		}
		s.c.log.Info("created the job's PodDisruptionBudget", "scaler", s.key, "min_available", es.Spec.MinReplicas, "selector", selector)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get PodDisruptionBudget %s: %w", es.Name, err)
	}
	var cur policyv1.PodDisruptionBudget
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cur); err != nil {
		return fmt.Errorf("decode PodDisruptionBudget %s: %w", es.Name, err)
	}
	if owner := metav1.GetControllerOf(&cur); owner == nil || owner.UID != es.UID {
		return fmt.Errorf("a PodDisruptionBudget named %s exists and is not this ElasticScaler's: rename one of them", es.Name)
	}
	if equality.Semantic.DeepEqual(cur.Spec.MinAvailable, spec.MinAvailable) && equality.Semantic.DeepEqual(cur.Spec.Selector, spec.Selector) {
		return nil
	}
	next := u.DeepCopy()
	specContent, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		return err
	}
	next.Object["spec"] = specContent
	if _, err := client.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update PodDisruptionBudget %s: %w", es.Name, err)
	}
	s.c.log.Info("updated the job's PodDisruptionBudget", "scaler", s.key, "min_available", es.Spec.MinReplicas, "selector", selector)
	return nil
}
