"""Running tasks: the loop of one worker process, and the pool that supervises several."""
