"""Building the course from source/: the editions (release, self-study, solutions),
their setup cell and schematics, the pretrained weights' lookup, the demo submissions,
the markdown images check and the website."""
