package etcdtest

import "go.uber.org/zap"

// nopLogger keeps the client's retry chatter out of test output.
var nopLogger = zap.NewNop()
