"""robo: the glue users touch — CLI, training loops, evaluation."""
