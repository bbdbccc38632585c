package autoscale

import (
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	"k8s.io/klog/v2"
)

func TestMain(m *testing.M) {
	// client-go logs through klog: the leader election's expected
	// failures would bury a test's own output.
	klog.SetLogger(logr.Discard())
	goleak.VerifyTestMain(m)
}
