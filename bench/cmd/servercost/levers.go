package main

// leverWorkloads are the script variants of bench/testdata/levers.
func leverWorkloads(e *env) ([]workload, error) { return nil, nil }
