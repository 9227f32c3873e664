//go:build !unix

package redisbench

import "time"

func processCPU() time.Duration { return 0 }
