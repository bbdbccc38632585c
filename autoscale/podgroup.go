package autoscale

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// The PodGroup kinds of the gang schedulers the controller keeps a group
// for: scheduler-plugins' coscheduling and Volcano. Neither publishes a
// Go module the controller could link, so it writes them unstructured.
var podGroupKinds = []struct {
	gk      schema.GroupKind
	version string
}{
	{schema.GroupKind{Group: "scheduling.x-k8s.io", Kind: "PodGroup"}, "v1alpha1"},
	{schema.GroupKind{Group: "scheduling.volcano.sh", Kind: "PodGroup"}, "v1beta1"},
}

// podGroups keeps, for each gang scheduler whose PodGroup CRD the API
// server serves (found by discovery, so a CRD installed later is found at
// a later sync), a PodGroup named as the job (the group the webhook puts
// the job's pods in, webhook.Config.GangScheduling) with minMember the
// ElasticScaler's minReplicas: the scheduler then places the job's
// workers only when at least min of them fit. The group is owned by the
// ElasticScaler, so it goes with it; it is written only when missing or
// when its minMember differs.
func (s *scalerSync) podGroups(ctx context.Context) error {
	var errs []error
	for _, k := range podGroupKinds {
		resources, err := s.c.deps.Mapper.Resources(ctx, k.gk, k.version)
		if meta.IsNoMatchError(err) {
			continue // that scheduler is not installed
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("discover %s: %w", k.gk, err))
			continue
		}
		if err := s.podGroup(ctx, resources[0]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// podGroup keeps the job's PodGroup of resource r.
func (s *scalerSync) podGroup(ctx context.Context, r schema.GroupVersionResource) error {
	es := s.es
	name := es.Spec.Job.Name
	client := s.c.deps.Dynamic.Resource(r).Namespace(es.Namespace)
	minMember := int64(es.Spec.MinReplicas)
	cur, err := client.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		pg := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"minMember": minMember}}}
		pg.SetAPIVersion(r.GroupVersion().String())
		pg.SetKind("PodGroup")
		pg.SetName(name)
		pg.SetNamespace(es.Namespace)
		pg.SetOwnerReferences([]metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "ElasticScaler", Name: es.Name, UID: es.UID, Controller: ptr.To(true),
		}})
		if _, err := client.Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create %s PodGroup %s: %w", r.Group, name, err)
		}
		s.c.log.Info("created the job's PodGroup", "scaler", s.key, "group", r.Group, "min_member", minMember)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get %s PodGroup %s: %w", r.Group, name, err)
	}
	if owner := metav1.GetControllerOf(cur); owner == nil || owner.UID != es.UID {
		return fmt.Errorf("a %s PodGroup named %s exists and is not this ElasticScaler's: rename one of them", r.Group, name)
	}
	if got, _, _ := unstructured.NestedInt64(cur.Object, "spec", "minMember"); got == minMember {
		return nil
	}
	next := cur.DeepCopy()
	if err := unstructured.SetNestedField(next.Object, minMember, "spec", "minMember"); err != nil {
		return err
	}
	if _, err := client.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update %s PodGroup %s: %w", r.Group, name, err)
	}
	s.c.log.Info("updated the job's PodGroup", "scaler", s.key, "group", r.Group, "min_member", minMember)
	return nil
}
