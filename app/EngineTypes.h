// Engine value types as they travel between the GUI thread and the engine worker through queued
// signals: each needs a Qt metatype, declared once here and registered by registerEngineMetaTypes().
#pragma once

#include <QMetaType>
#include <QString>
#include <QVector>

#include "gemma/Engine.h"

namespace desk {

// One chat generation as the worker runs it.
struct GenerationJob {
    std::vector<gemma::ChatMessage> messages;
    gemma::SamplingParams sampling;
    int maxNewTokens = 1024;
};

void registerEngineMetaTypes();

}  // namespace desk

Q_DECLARE_METATYPE(gemma::OpenOptions)
Q_DECLARE_METATYPE(gemma::ModelInfo)
Q_DECLARE_METATYPE(gemma::MemoryEstimate)
Q_DECLARE_METATYPE(gemma::StepStats)
Q_DECLARE_METATYPE(gemma::GenerationStats)
Q_DECLARE_METATYPE(gemma::DecodeBenchmarkResult)
Q_DECLARE_METATYPE(desk::GenerationJob)
