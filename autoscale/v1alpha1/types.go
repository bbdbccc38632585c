package v1alpha1

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ElasticScaler scales a ringside training job's workers on measured
// goodput: it adds a worker while one more still pays for itself (its
// marginal efficiency stays at or above TargetEfficiency) and removes one
// when it no longer does.
//
// +kubebuilder:object:root=true
// The scale subresource lets `kubectl scale` and a HorizontalPodAutoscaler
// set spec.replicas (see ElasticScalerSpec.Replicas); its status replicas
// are the target's and its selector the target's pods'.
//
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.currentReplicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=es;escaler,categories=ringside
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.scaleTargetRef.name`
// +kubebuilder:printcolumn:name="Job",type=string,JSONPath=`.spec.job.name`,priority=1
// +kubebuilder:printcolumn:name="Min",type=integer,JSONPath=`.spec.minReplicas`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.maxReplicas`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.currentReplicas`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredReplicas`,priority=1
// +kubebuilder:printcolumn:name="World",type=integer,JSONPath=`.status.worldSize`
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.status.jobGeneration`
// +kubebuilder:printcolumn:name="Goodput",type=number,JSONPath=`.status.goodput`
// +kubebuilder:printcolumn:name="Efficiency",type=number,JSONPath=`.status.efficiency`,priority=1
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ElasticScaler struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ElasticScalerSpec `json:"spec"`
	// +optional
	Status ElasticScalerStatus `json:"status,omitempty"`
}

// ElasticScalerSpec is what the user asks for.
//
// +kubebuilder:validation:XValidation:rule="size(self.scaleTargetRef.kind) > 0 && size(self.scaleTargetRef.name) > 0",message="scaleTargetRef needs a kind and a name"
// +kubebuilder:validation:XValidation:rule="self.minReplicas <= self.maxReplicas",message="minReplicas must not exceed maxReplicas"
// +kubebuilder:validation:XValidation:rule="self.minReplicas % self.unit == 0 && self.maxReplicas % self.unit == 0",message="minReplicas and maxReplicas must be multiples of unit"
// +kubebuilder:validation:XValidation:rule="self.replicas == 0 || (self.replicas >= self.minReplicas && self.replicas <= self.maxReplicas)",message="replicas must be 0 (the goodput policy decides) or within minReplicas and maxReplicas",fieldPath=".replicas"
// +kubebuilder:validation:XValidation:rule="self.replicas % self.unit == 0",message="replicas must be a multiple of unit",fieldPath=".replicas"
type ElasticScalerSpec struct {
	// ScaleTargetRef names the workload whose replicas are the job's
	// workers: anything with a scale subresource (a StatefulSet, a
	// Deployment, a JobSet, a PyTorchJob ...).
	ScaleTargetRef autoscalingv2.CrossVersionObjectReference `json:"scaleTargetRef"`

	// Job names the ringside job the workers form (its sidecars'
	// --job), whose members' measurements drive the decisions.
	Job JobReference `json:"job"`

	// MinReplicas is the fewest workers the job runs with.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinReplicas int32 `json:"minReplicas,omitempty"`

	// Replicas, when not 0, is the size the workers are kept at, instead
	// of the size the goodput policy decides: what `kubectl scale` and a
	// HorizontalPodAutoscaler write through the scale subresource. 0 (the
	// default) leaves the size to the policy; `kubectl scale --replicas=0`
	// gives it back. Other values must be within MinReplicas and
	// MaxReplicas and a multiple of Unit. (An HPA leaves a target at 0
	// replicas alone: set this before pointing one at the ElasticScaler.)
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// MaxReplicas is the most workers the job may grow to.
	// +kubebuilder:validation:Minimum=1
	MaxReplicas int32 `json:"maxReplicas"`

	// Unit is the step of every change: the replicas are always a
	// multiple of it (a node's worth of workers, say).
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	Unit int32 `json:"unit,omitempty"`

	// TargetEfficiency is the least marginal efficiency of one more
	// unit of workers: the goodput it adds over the goodput per unit the
	// job has now. The job grows while the estimate for one more unit is
	// at least this, and shrinks when the last unit added is below it.
	// +kubebuilder:default=0.7
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	// +optional
	TargetEfficiency float64 `json:"targetEfficiency,omitempty"`

	// PendingTimeoutSeconds is how long a worker may stay Pending (the
	// cluster cannot place it) before the scaler holds growth and shrinks
	// its desired size back to what runs.
	// +kubebuilder:default=120
	// +kubebuilder:validation:Minimum=1
	// +optional
	PendingTimeoutSeconds int32 `json:"pendingTimeoutSeconds,omitempty"`

	// PodDisruptionBudget, when true, has the controller keep a
	// PodDisruptionBudget named as the ElasticScaler over the target's
	// pods, with minAvailable MinReplicas, owned by the ElasticScaler (so
	// deleted with it): a node drain or an eviction then takes workers
	// only while the job keeps its minimum. Turning it off leaves the
	// budget in place; delete it with `kubectl delete pdb`.
	// +optional
	PodDisruptionBudget bool `json:"podDisruptionBudget,omitempty"`

	// Behavior configures scaling up and down as in a
	// HorizontalPodAutoscaler: stabilization windows, policies and
	// selectPolicy, with the HorizontalPodAutoscaler's defaults for
	// whatever is left out. Its values are checked as a
	// HorizontalPodAutoscaler's are; tolerance is refused: the scaler's
	// decisions come from marginal efficiency, not from a metric's ratio
	// to a target.
	// +kubebuilder:validation:XValidation:rule="!has(self.scaleUp) || !has(self.scaleUp.policies) || self.scaleUp.policies.all(p, p.type == 'Pods' || p.type == 'Percent')",message="a policy's type must be Pods or Percent",fieldPath=".scaleUp.policies"
	// +kubebuilder:validation:XValidation:rule="!has(self.scaleUp) || !has(self.scaleUp.policies) || self.scaleUp.policies.all(p, p.value > 0)",message="a policy's value must be positive",fieldPath=".scaleUp.policies"
	// +kubebuilder:validation:XValidation:rule="!has(self.scaleUp) || !has(self.scaleUp.policies) || self.scaleUp.policies.all(p, p.periodSeconds >= 1 && p.periodSeconds <= 1800)",message="a policy's periodSeconds must be in 1-1800",fieldPath=".scaleUp.policies"
	// +kubebuilder:validation:XValidation:rule="!has(self.scaleUp) || !has(self.scaleUp.stabilizationWindowSeconds) || (self.scaleUp.stabilizationWindowSeconds >= 0 && self.scaleUp.stabilizationWindowSeconds <= 3600)",message="stabilizationWindowSeconds must be in 0-3600",fieldPath=".scaleUp.stabilizationWindowSeconds"
	// +kubebuilder:validation:XValidation:rule="!has(self.scaleUp) || !has(self.scaleUp.selectPolicy) || self.scaleUp.selectPolicy in ['Max', 'Min', 'Disabled']",message="selectPolicy must be Max, Min or Disabled",fieldPath=".scaleUp.selectPolicy"
	// +kubebuilder:validation:XValidation:rule="!has(self.scaleUp) || !has(self.scaleUp.tolerance)",message="the ElasticScaler does not use tolerance; its decisions come from marginal efficiency",fieldPath=".scaleUp.tolerance"
	// +kubebuilder:validation:XValidation:rule="!has(self.scaleDown) || !has(self.scaleDown.policies) || self.scaleDown.policies.all(p, p.type == 'Pods' || p.type == 'Percent')",message="a policy's type must be Pods or Percent",fieldPath=".scaleDown.policies"
	// +kubebuilder:validation:XValidation:rule="!has(self.scaleDown) || !has(self.scaleDown.policies) || self.scaleDown.policies.all(p, p.value > 0)",message="a policy's value must be positive",fieldPath=".scaleDown.policies"
	// +kubebuilder:validation:XValidation:rule="!has(self.scaleDown) || !has(self.scaleDown.policies) || self.scaleDown.policies.all(p, p.periodSeconds >= 1 && p.periodSeconds <= 1800)",message="a policy's periodSeconds must be in 1-1800",fieldPath=".scaleDown.policies"
	// +kubebuilder:validation:XValidation:rule="!has(self.scaleDown) || !has(self.scaleDown.stabilizationWindowSeconds) || (self.scaleDown.stabilizationWindowSeconds >= 0 && self.scaleDown.stabilizationWindowSeconds <= 3600)",message="stabilizationWindowSeconds must be in 0-3600",fieldPath=".scaleDown.stabilizationWindowSeconds"
	// +kubebuilder:validation:XValidation:rule="!has(self.scaleDown) || !has(self.scaleDown.selectPolicy) || self.scaleDown.selectPolicy in ['Max', 'Min', 'Disabled']",message="selectPolicy must be Max, Min or Disabled",fieldPath=".scaleDown.selectPolicy"
	// +kubebuilder:validation:XValidation:rule="!has(self.scaleDown) || !has(self.scaleDown.tolerance)",message="the ElasticScaler does not use tolerance; its decisions come from marginal efficiency",fieldPath=".scaleDown.tolerance"
	// +optional
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`

	// Straggler says what the controller does when the job's leader
	// names a worker a straggler (it computes slower than the others):
	// an Event either way, and with policy replace the worker's pod is
	// deleted (it drains first, losing no step) after its node is tainted
	// ringside.dev/straggler=<job>:NoSchedule, so that its recreated pod
	// lands elsewhere.
	// +optional
	Straggler *StragglerPolicy `json:"straggler,omitempty"`
}

// StragglerPolicy is what the controller does about a straggler.
type StragglerPolicy struct {
	// Policy is report (an Event on the ElasticScaler and the pod) or
	// replace (also taint the straggler's node and delete its pod, where
	// the job stays at or above its min world size without it).
	// +kubebuilder:validation:Enum=report;replace
	// +kubebuilder:default=report
	// +optional
	Policy string `json:"policy,omitempty"`
}

// The straggler policies.
const (
	StragglerReport  = "report"
	StragglerReplace = "replace"
)

// JobReference names a ringside job: its key space in etcd is
// /ringside/<namespace>/<name>/.
type JobReference struct {
	// Name is the job's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace is the job's namespace in ringside's key space; the
	// ElasticScaler's own namespace when empty.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// ElasticScalerStatus is what the controller observed and decided.
type ElasticScalerStatus struct {
	// ObservedGeneration is the spec generation the status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// CurrentReplicas is the target's replicas as last seen: the scale
	// subresource's status replicas.
	// +optional
	CurrentReplicas int32 `json:"currentReplicas"`

	// Selector is the label selector of the target's pods, as the
	// target's scale reports it: the scale subresource's selector, which
	// a HorizontalPodAutoscaler reads its pods' metrics with.
	// +optional
	Selector string `json:"selector,omitempty"`

	// WorldSize is the job's world size in its current generation.
	// +optional
	WorldSize int32 `json:"worldSize,omitempty"`

	// JobGeneration is the number of the job's current generation (the
	// ring's, not the object's metadata.generation).
	// +optional
	JobGeneration int64 `json:"jobGeneration,omitempty"`

	// Goodput is the job's goodput at its current world size, in samples
	// per second; absent while the status holds no recent reading there.
	// +optional
	Goodput *float64 `json:"goodput,omitempty"`

	// Phase sums the conditions up in one word, for `kubectl get`:
	// Stable, Resizing, Measuring, EtcdUnreachable, Blocked, Stopped or
	// Suspended
	// (see the Phase constants).
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// DesiredReplicas is the size the controller decided.
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas"`

	// LastScaleTime is when the controller last changed the target's
	// replicas.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`

	// Efficiency is the marginal efficiency the last decision used: of
	// one more unit when growing or holding, of the last unit when
	// shrinking.
	// +optional
	Efficiency *float64 `json:"efficiency,omitempty"`

	// Throughput holds the job's measured throughput at each world size
	// it has run at.
	// +listType=map
	// +listMapKey=worldSize
	// +optional
	Throughput []WorldSizeThroughput `json:"throughput,omitempty"`

	// Drain is what the job's drains measured, and the drain grace the
	// webhook gives its new workers from it; absent before the job's
	// first drain.
	// +optional
	Drain *DrainStatus `json:"drain,omitempty"`

	// Conditions are AbleToScale, ScalingActive and ScalingLimited, as
	// in a HorizontalPodAutoscaler; Suspended while a queue (Kueue)
	// holds the target; JobStopped when trainer crashes stopped the job.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DrainStatus is how long the job's workers took to drain (the sidecars
// store each drain's duration in etcd) and the grace it asks for.
type DrainStatus struct {
	// Samples is how many drains the figures hold (the newest, up to 64).
	Samples int32 `json:"samples"`
	// P99Seconds is their 99th percentile (nearest rank: with fewer than
	// 100, the slowest).
	P99Seconds float64 `json:"p99Seconds"`
	// GracePeriodSeconds is P99Seconds times the controller's safety
	// factor, rounded up and bounded by its --drain-grace-max: the drain
	// grace the webhook gives the job's new workers when it is above the
	// webhook's own --drain-grace (their termination grace period is 15 s
	// more, and never less than the pod asks for).
	GracePeriodSeconds int32 `json:"gracePeriodSeconds"`
}

// WorldSizeThroughput is the job's measured throughput at one world size.
type WorldSizeThroughput struct {
	// WorldSize is the number of workers the job ran with.
	WorldSize int32 `json:"worldSize"`
	// SamplesPerSecond is the job's throughput at that size: the sum of
	// its members' samples per second, averaged over the observations.
	SamplesPerSecond float64 `json:"samplesPerSecond"`
	// Goodput is SamplesPerSecond times the statistical efficiency of
	// the batch at that size, from the gradient noise scale the trainers
	// report; equal to SamplesPerSecond when they report none.
	Goodput float64 `json:"goodput"`
	// Observations is how many measurements the averages hold.
	Observations int32 `json:"observations"`
	// LastObservedTime is when the newest of them was taken.
	LastObservedTime metav1.Time `json:"lastObservedTime"`
}

// ElasticScalerList is a list of ElasticScalers.
//
// +kubebuilder:object:root=true
type ElasticScalerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ElasticScaler `json:"items"`
}

// Phase is the one-word summary of an ElasticScaler's conditions.
// +kubebuilder:validation:Enum=Stable;Resizing;Measuring;EtcdUnreachable;Blocked;Stopped;Suspended
type Phase string

// The phases, first match wins from the top.
const (
	// PhaseSuspended: a queue (Kueue) suspended the target or holds its
	// pods (Suspended); the controller neither scales it nor reads its
	// job as failing until it resumes.
	PhaseSuspended Phase = "Suspended"
	// PhaseStopped: trainer crashes stopped the job (JobStopped).
	PhaseStopped Phase = "Stopped"
	// PhaseBlocked: the controller cannot scale (AbleToScale is false:
	// an invalid spec, a target whose scale it cannot read or update).
	PhaseBlocked Phase = "Blocked"
	// PhaseEtcdUnreachable: the job's status could not be read from
	// etcd; the size is held and training goes on at it.
	PhaseEtcdUnreachable Phase = "EtcdUnreachable"
	// PhaseMeasuring: no recent measurement to decide on (ScalingActive
	// is false).
	PhaseMeasuring Phase = "Measuring"
	// PhaseResizing: the job's world does not match the decided size yet.
	PhaseResizing Phase = "Resizing"
	// PhaseStable: the job runs at the decided size.
	PhaseStable Phase = "Stable"
)

// Condition types of an ElasticScaler, as a HorizontalPodAutoscaler's.
const (
	// AbleToScale: the controller can read and change the target's scale.
	AbleToScale = "AbleToScale"
	// ScalingActive: the controller has the measurements it needs to
	// decide; false while the job has no status yet.
	ScalingActive = "ScalingActive"
	// ScalingLimited: the decision was held at min, max, or by pending
	// workers.
	ScalingLimited = "ScalingLimited"
	// JobStopped: trainer crashes stopped the job (restart mode: its
	// restart budget was spent, or its trainers failed before their first
	// step generation after generation); the message says which workers,
	// their exit and its cause. Absent while the job runs.
	JobStopped = "JobStopped"
	// Suspended: a queue holds the target: its spec.suspend (a Job, a
	// JobSet) or spec.runPolicy.suspend (a Kubeflow job) is true, or all
	// its pods wait behind Kueue's admission scheduling gate. Absent
	// while it runs.
	Suspended = "Suspended"
)
