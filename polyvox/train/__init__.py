"""Training polyvox's own voices: teacher data, the distilled student, the training loop.

    sentences.py       a seeded generator of varied English sentences (our own grammar)
    teacher_data.py    the Piper teacher over those sentences -> sharded phoneme ids,
                       durations and latents z (`python -m polyvox.train.teacher_data`)
    student.py         the student's config (a FlowLM over grouped z) and its losses
    batches.py         teacher-forcing batches from the shards
    distill.py         the training loop with resume (`python -m polyvox.train.distill`)
    checkpoints.py     checkpoints, the exported student and its strict loading
    student_family.py  the trained student behind the engine's stage protocol

See docs/distill.md.
"""
