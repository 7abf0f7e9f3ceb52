//! Synthetic checkpoints (`glm5v synth`): not written yet.
