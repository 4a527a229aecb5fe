// Facts about a graph read as an image classifier ([N, C, H, W] in, [N, classes] out).
#pragma once

#include "graph/graph.h"

namespace gpulab {

// True when the graph's one output is a Softmax over the classes (softmax_over_classes), perhaps
// behind views (Identity, Dropout, Flatten, Reshape): the model outputs probabilities, and a second
// softmax over them would flatten them (1000 classes would each show about 0.1%).
bool outputs_class_probabilities(const Graph& graph);

}  // namespace gpulab
