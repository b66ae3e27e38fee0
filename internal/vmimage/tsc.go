package vmimage

import "errors"

var errNoTSC = errors.New("the TSC frequency is only measured on amd64")
