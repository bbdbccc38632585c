package autoscale

import (
	"errors"
	"fmt"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/coordinator"
)

// Defaults of the spec's optional fields, as the CRD's schema sets them.
// The controller applies them to a zero field too, so that an object stored
// under an older CRD without the defaults still scales.
const (
	defaultMinReplicas           = 1
	defaultUnit                  = 1
	defaultTargetEfficiency      = 0.7
	defaultPendingTimeoutSeconds = 120
)

// HPA's bounds on a behavior's values (autoscaling/v2 validation).
const (
	maxStabilizationWindowSeconds = 3600
	maxPolicyPeriodSeconds        = 1800
)

// decode converts an ElasticScaler from the dynamic informer's cache into
// the typed object, never mutating u. The spec is decoded strictly (an
// unknown field is an error: a setting the controller would ignore) and
// validated; specErr says what is wrong with it, for a condition. A status
// that does not decode is dropped (statusOK false): the controller writes a
// new one.
func decode(u *unstructured.Unstructured) (es *v1alpha1.ElasticScaler, statusOK bool, specErr error) {
	es = &v1alpha1.ElasticScaler{}
	es.APIVersion, es.Kind = u.GetAPIVersion(), u.GetKind()
	es.Name, es.Namespace, es.UID = u.GetName(), u.GetNamespace(), u.GetUID()
	es.Generation, es.ResourceVersion = u.GetGeneration(), u.GetResourceVersion()
	obj := u.UnstructuredContent()

	statusOK = true
	if raw, ok := obj["status"]; ok {
		m, isMap := raw.(map[string]any)
		statusOK = isMap && runtime.DefaultUnstructuredConverter.FromUnstructured(m, &es.Status) == nil
		if !statusOK {
			es.Status = v1alpha1.ElasticScalerStatus{}
		}
	}

	raw := obj["spec"]
	if raw == nil {
		return es, statusOK, errors.New("spec is missing")
	}
	m, isMap := raw.(map[string]any)
	if !isMap {
		return es, statusOK, fmt.Errorf("spec is a %T, not an object", raw)
	}
	var spec v1alpha1.ElasticScalerSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(m, &spec, true); err != nil {
		return es, statusOK, fmt.Errorf("spec does not decode: %w", err)
	}
	specDefaults(&spec)
	if err := validate(es.Namespace, spec); err != nil {
		return es, statusOK, err
	}
	es.Spec = spec
	return es, statusOK, nil
}

func specDefaults(s *v1alpha1.ElasticScalerSpec) {
	if s.MinReplicas == 0 {
		s.MinReplicas = defaultMinReplicas
	}
	if s.Unit == 0 {
		s.Unit = defaultUnit
	}
	if s.TargetEfficiency == 0 {
		s.TargetEfficiency = defaultTargetEfficiency
	}
	if s.PendingTimeoutSeconds == 0 {
		s.PendingTimeoutSeconds = defaultPendingTimeoutSeconds
	}
}

// validate checks what the CRD's schema checks, for objects stored before
// it did (or under a CRD without it): every problem, joined.
func validate(namespace string, s v1alpha1.ElasticScalerSpec) error {
	var errs []error
	ref := s.ScaleTargetRef
	if ref.Kind == "" || ref.Name == "" {
		errs = append(errs, fmt.Errorf("scaleTargetRef needs a kind and a name, got kind %q name %q", ref.Kind, ref.Name))
	}
	if _, err := schema.ParseGroupVersion(ref.APIVersion); err != nil {
		errs = append(errs, fmt.Errorf("scaleTargetRef.apiVersion: %w", err))
	}
	jobNS := s.Job.Namespace
	if jobNS == "" {
		jobNS = namespace
	}
	if err := coordinator.DefaultConfig(jobNS, s.Job.Name).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("job: %w", err))
	}
	switch {
	case s.MinReplicas < 1 || s.MaxReplicas < 1 || s.Unit < 1:
		errs = append(errs, fmt.Errorf("minReplicas (%d), maxReplicas (%d) and unit (%d) must be at least 1", s.MinReplicas, s.MaxReplicas, s.Unit))
	case s.MinReplicas > s.MaxReplicas:
		errs = append(errs, fmt.Errorf("minReplicas (%d) must not exceed maxReplicas (%d)", s.MinReplicas, s.MaxReplicas))
	case s.MinReplicas%s.Unit != 0 || s.MaxReplicas%s.Unit != 0:
		errs = append(errs, fmt.Errorf("minReplicas (%d) and maxReplicas (%d) must be multiples of unit (%d)", s.MinReplicas, s.MaxReplicas, s.Unit))
	}
	if r := s.Replicas; r != 0 && s.Unit >= 1 && (r < s.MinReplicas || r > s.MaxReplicas || r%s.Unit != 0) {
		errs = append(errs, fmt.Errorf("replicas (%d) must be 0 (the policy decides) or within minReplicas (%d) and maxReplicas (%d) and a multiple of unit (%d)", r, s.MinReplicas, s.MaxReplicas, s.Unit))
	}
	if !(s.TargetEfficiency > 0 && s.TargetEfficiency <= 1) {
		errs = append(errs, fmt.Errorf("targetEfficiency must be in (0, 1], got %v", s.TargetEfficiency))
	}
	if s.PendingTimeoutSeconds < 1 {
		errs = append(errs, fmt.Errorf("pendingTimeoutSeconds must be at least 1, got %d", s.PendingTimeoutSeconds))
	}
	if b := s.Behavior; b != nil {
		errs = append(errs, validateRules("behavior.scaleUp", b.ScaleUp), validateRules("behavior.scaleDown", b.ScaleDown))
	}
	return errors.Join(errs...)
}

// validateRules checks a behavior's rules as the HorizontalPodAutoscaler's
// validation does, and refuses a tolerance: the policy would ignore it, and
// a setting ignored without a word is worse than one refused.
func validateRules(path string, r *autoscalingv2.HPAScalingRules) error {
	if r == nil {
		return nil
	}
	var errs []error
	if w := r.StabilizationWindowSeconds; w != nil && (*w < 0 || *w > maxStabilizationWindowSeconds) {
		errs = append(errs, fmt.Errorf("%s.stabilizationWindowSeconds must be in 0-%d, got %d", path, maxStabilizationWindowSeconds, *w))
	}
	if p := r.SelectPolicy; p != nil {
		switch *p {
		case autoscalingv2.MaxChangePolicySelect, autoscalingv2.MinChangePolicySelect, autoscalingv2.DisabledPolicySelect:
		default:
			errs = append(errs, fmt.Errorf("%s.selectPolicy must be Max, Min or Disabled, got %q", path, *p))
		}
	}
	if r.Tolerance != nil {
		errs = append(errs, fmt.Errorf("%s.tolerance is set (%s): the ElasticScaler does not use tolerance; its decisions come from marginal efficiency", path, r.Tolerance))
	}
	for i, p := range r.Policies {
		if p.Type != autoscalingv2.PodsScalingPolicy && p.Type != autoscalingv2.PercentScalingPolicy {
			errs = append(errs, fmt.Errorf("%s.policies[%d].type must be Pods or Percent, got %q", path, i, p.Type))
		}
		if p.Value <= 0 {
			errs = append(errs, fmt.Errorf("%s.policies[%d].value must be positive, got %d", path, i, p.Value))
		}
		if p.PeriodSeconds <= 0 || p.PeriodSeconds > maxPolicyPeriodSeconds {
			errs = append(errs, fmt.Errorf("%s.policies[%d].periodSeconds must be in 1-%d, got %d", path, i, maxPolicyPeriodSeconds, p.PeriodSeconds))
		}
	}
	return errors.Join(errs...)
}
