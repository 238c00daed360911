"""Stage 1, what a scene is: the scene-script schema, compiled scenes and questions, the timeline."""
