"""Image benchmarks of the semi-supervised GANs (MNIST, SVHN, CIFAR-10): readers, splits, minis."""
