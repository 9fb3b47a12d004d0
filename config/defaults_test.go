package config_test

import (
	"fmt"
	"time"

	"github.com/relaystation/relay/config"
)

// A Config's setDefaults: a positive value is kept, zero and negative ones
// get the default.
func ExamplePositive() {
	fmt.Println(config.Positive(3, 5), config.Positive(0, 5), config.Positive(-1, 5))
	fmt.Println(config.Positive(time.Second, time.Minute), config.Positive(time.Duration(0), time.Minute))
	// Output:
	// 3 5 5
	// 1s 1m0s
}
