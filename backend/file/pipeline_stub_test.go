package file

func childPipeline(childConfig) error { return nil }
